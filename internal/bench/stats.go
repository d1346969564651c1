package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram in the spirit of HDR histograms:
// values below 128 ns are exact, above that each power of two is split into 64
// equal buckets, so any reported percentile is within 1/64 (≈1.6 %) of the true
// value. It is not safe for concurrent use: give each worker its own and Merge.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64 // ns
	min    uint64
	max    uint64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // 64 sub-buckets per power of two
	histLinear  = 2 * histSub      // values below this are stored exactly
	histMaxBits = 43               // ≈ 2.4 hours in ns; larger values are clamped
	histBuckets = histLinear + (histMaxBits-histSubBits-1)*histSub
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{min: math.MaxUint64} }

func bucketOf(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	if bits.Len64(v) > histMaxBits {
		v = 1<<histMaxBits - 1
	}
	e := bits.Len64(v) - (histSubBits + 1) // ≥ 1
	m := v >> uint(e)                      // in [64, 128)
	return histLinear + (e-1)*histSub + int(m-histSub)
}

// bucketRange returns the smallest and largest value that fall into bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < histLinear {
		return uint64(i), uint64(i)
	}
	j := i - histLinear
	e := j/histSub + 1
	m := uint64(j%histSub + histSub)
	lo = m << uint(e)
	hi = lo + (1 << uint(e)) - 1
	return lo, hi
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds every observation of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
}

// Count of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Max observation, exact.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min observation, exact.
func (h *Histogram) Min() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean of the observations, exact.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// observations lie: the midpoint of the bucket holding the ceil(q·n)-th smallest
// observation, clamped to the exact min and max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			if v < h.min {
				v = h.min
			}
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// Latency is the summary of a histogram as it goes into the JSON results, in µs.
type Latency struct {
	Count  uint64  `json:"count"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// Summary of the histogram: mean, p50, p90, p99, p99.9 and max.
func (h *Histogram) Summary() Latency {
	return Latency{
		Count:  h.n,
		MeanUs: us(h.Mean()),
		P50Us:  us(h.Quantile(0.50)),
		P90Us:  us(h.Quantile(0.90)),
		P99Us:  us(h.Quantile(0.99)),
		P999Us: us(h.Quantile(0.999)),
		MaxUs:  us(h.Max()),
	}
}

// median of xs (NaN-free); xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ { // insertion sort: a handful of rounds
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
