package model

import (
	"math"
	"math/rand/v2"
)

// noise turns a nominal service time into a sampled one: base × lognormal factor (mean 1,
// coefficient of variation CV) plus, with probability StallProb, StallUs (a GC pause or a
// descheduled thread: rare, long, and what makes waiting for the slowest of S shards costly).
//
// Approximation: the factor is drawn from a table of 4096 lognormal quantiles (the midpoints
// of 4096 equal-probability bins, rescaled so the table's mean is exactly 1) instead of
// exp(normal): the "all" mode draws one factor per shard per frame (10⁸–10⁹ draws for 1M pods),
// and a table lookup costs one random number. The table loses the tail beyond the 1/8192
// quantile (3.8σ), which slightly lowers the CV; rare long services are the stalls' job.
//
// One 64-bit random number serves both draws: its top 12 bits pick the table entry, its low 52
// bits are the uniform the stall is decided by (independent bits of a PCG output).
type noise struct {
	src     *rand.PCG  // the run's generator, called directly (no interface call per draw)
	rng     *rand.Rand // the same generator, for the rarer draws
	table   []float64  // nil when CV == 0
	stall   uint64     // a stall happens when the low 52 bits are below this
	stallP  float64
	stallUs float64
}

const noiseBits = 12

const lowMask = 1<<(64-noiseBits) - 1

func newNoise(src *rand.PCG, rng *rand.Rand, cv, stallP, stallUs float64) *noise {
	n := &noise{src: src, rng: rng, stallP: stallP, stallUs: stallUs,
		stall: uint64(stallP * float64(uint64(1)<<(64-noiseBits)))}
	if cv > 0 {
		s2 := math.Log1p(cv * cv)
		mu, sigma := -s2/2, math.Sqrt(s2)
		n.table = make([]float64, 1<<noiseBits)
		sum := 0.0
		for i := range n.table {
			q := (float64(i) + 0.5) / float64(len(n.table))
			z := math.Sqrt2 * math.Erfinv(2*q-1)
			n.table[i] = math.Exp(mu + sigma*z)
			sum += n.table[i]
		}
		mean := sum / float64(len(n.table))
		for i := range n.table {
			n.table[i] /= mean
		}
	}
	return n
}

// service samples one service whose nominal time is base µs. A zero-cost service stays zero
// (the stage is not modelled) and draws no random numbers.
func (n *noise) service(base float64) float64 {
	if base <= 0 {
		return 0
	}
	if n.table == nil && n.stallP == 0 {
		return base
	}
	u := n.src.Uint64()
	d := base
	if n.table != nil {
		d *= n.table[u>>(64-noiseBits)]
	}
	if u&lowMask < n.stall {
		d += n.stallUs
	}
	return d
}

// services samples k services of base µs each done as one job (the aggregated proposals):
// the sum of k independent factors has mean k and CV/√k, approximated by one table factor
// shrunk towards 1 by √k; the number of stalls is Poisson(k·StallProb).
func (n *noise) services(base float64, k int) float64 {
	if base <= 0 || k <= 0 {
		return 0
	}
	if k == 1 {
		return n.service(base)
	}
	d := base * float64(k)
	if n.table != nil {
		f := n.table[n.src.Uint64()>>(64-noiseBits)]
		d *= 1 + (f-1)/math.Sqrt(float64(k))
	}
	if n.stallP > 0 {
		d += float64(n.poisson(n.stallP*float64(k))) * n.stallUs
	}
	return d
}

// poisson draws from Poisson(mean): Knuth's product of uniforms for small means, a rounded
// normal for large ones (where the count is large and its shape hardly matters).
func (n *noise) poisson(mean float64) int {
	if mean > 30 {
		return max(0, int(math.Round(mean+math.Sqrt(mean)*n.rng.NormFloat64())))
	}
	l, k, p := math.Exp(-mean), 0, 1.0
	for {
		p *= n.rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
