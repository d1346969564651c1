package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sample is one Prometheus text-format sample.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Snapshot is a scrape of selected metric families.
type Snapshot struct {
	At      time.Time
	Samples []Sample
}

// Scrape fetches url and keeps the samples whose name starts with one of prefixes.
func Scrape(ctx context.Context, c *http.Client, url string, prefixes ...string) (*Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	return ParseMetrics(resp.Body, prefixes...)
}

// ParseMetrics parses the Prometheus text format, keeping names with one of prefixes (all if none).
func ParseMetrics(r io.Reader, prefixes ...string) (*Snapshot, error) {
	s := &Snapshot{At: time.Now()}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		keep := len(prefixes) == 0
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				keep = true
				break
			}
		}
		if !keep {
			continue
		}
		smp, ok := parseSample(line)
		if ok {
			s.Samples = append(s.Samples, smp)
		}
	}
	return s, sc.Err()
}

func parseSample(line string) (Sample, bool) {
	var smp Sample
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return smp, false
	}
	smp.Name = line[:i]
	rest := line[i:]
	smp.Labels = map[string]string{}
	if rest[0] == '{' {
		j := 1
		for j < len(rest) && rest[j] != '}' {
			eq := strings.IndexByte(rest[j:], '=')
			if eq < 0 {
				return smp, false
			}
			key := strings.TrimSpace(strings.TrimLeft(rest[j:j+eq], ","))
			j += eq + 1
			if j >= len(rest) || rest[j] != '"' {
				return smp, false
			}
			j++
			var val strings.Builder
			for j < len(rest) && rest[j] != '"' {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
				} else {
					val.WriteByte(rest[j])
				}
				j++
			}
			j++ // closing quote
			smp.Labels[key] = val.String()
			for j < len(rest) && (rest[j] == ',' || rest[j] == ' ') {
				j++
			}
		}
		if j >= len(rest) {
			return smp, false
		}
		rest = rest[j+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return smp, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return smp, false
	}
	smp.Value = v
	return smp, true
}

// Sum adds the samples named name whose labels match every key=value in match.
func (s *Snapshot) Sum(name string, match map[string]string) float64 {
	if s == nil {
		return 0
	}
	t := 0.0
	for _, smp := range s.Samples {
		if smp.Name != name || !labelsMatch(smp.Labels, match) {
			continue
		}
		t += smp.Value
	}
	return t
}

func labelsMatch(l, match map[string]string) bool {
	for k, v := range match {
		if l[k] != v {
			return false
		}
	}
	return true
}

// Counters sums the samples named name by the values of the labels in by (joined with "|").
func (s *Snapshot) Counters(name string, by ...string) map[string]float64 {
	out := map[string]float64{}
	if s == nil {
		return out
	}
	for _, smp := range s.Samples {
		if smp.Name != name {
			continue
		}
		parts := make([]string, len(by))
		for i, k := range by {
			parts[i] = smp.Labels[k]
		}
		out[strings.Join(parts, "|")] += smp.Value
	}
	return out
}

// CounterDelta is after − before per key (a key absent before, or a counter that went
// backwards, counts from zero); keys that did not grow are left out.
func CounterDelta(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, a := range after {
		d := a
		if b, ok := before[k]; ok && b <= a {
			d = a - b
		}
		if d > 0 {
			out[k] = d
		}
	}
	return out
}

// Hist is a cumulative histogram: upper bounds and counts (the last bound is +Inf).
type Hist struct {
	Bounds []float64
	Counts []float64
	Sum    float64
}

// Count is the number of observations.
func (h *Hist) Count() float64 {
	if h == nil || len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile interpolates linearly inside the bucket holding rank q, like PromQL's histogram_quantile.
// Kept by hand on purpose: a scraped Prometheus histogram has only the exporter's le bounds, which
// neither HdrHistogram nor gonum/stat can take in; the reference code (promql's bucket quantile)
// lives in the Prometheus server module, whose dependency tree is far larger than these 25 lines.
func (h *Hist) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	for i, c := range h.Counts {
		if c >= rank {
			if math.IsInf(h.Bounds[i], 1) {
				if i == 0 {
					return math.NaN()
				}
				return h.Bounds[i-1]
			}
			lo, prev := 0.0, 0.0
			if i > 0 {
				lo, prev = h.Bounds[i-1], h.Counts[i-1]
			}
			if c == prev {
				return h.Bounds[i]
			}
			return lo + (h.Bounds[i]-lo)*(rank-prev)/(c-prev)
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Histograms groups the buckets of histogram family name by the values of the labels in by,
// summing everything else (other labels).
func (s *Snapshot) Histograms(name string, by ...string) map[string]*Hist {
	type acc struct {
		b   map[float64]float64
		sum float64
	}
	groups := map[string]*acc{}
	key := func(l map[string]string) string {
		parts := make([]string, len(by))
		for i, k := range by {
			parts[i] = l[k]
		}
		return strings.Join(parts, "|")
	}
	if s == nil {
		return nil
	}
	for _, smp := range s.Samples {
		switch smp.Name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(smp.Labels["le"], 64)
			if err != nil {
				continue
			}
			k := key(smp.Labels)
			g := groups[k]
			if g == nil {
				g = &acc{b: map[float64]float64{}}
				groups[k] = g
			}
			g.b[le] += smp.Value
		case name + "_sum":
			k := key(smp.Labels)
			if g := groups[k]; g != nil {
				g.sum += smp.Value
			}
		}
	}
	out := map[string]*Hist{}
	for k, g := range groups {
		h := &Hist{Sum: g.sum}
		for le := range g.b {
			h.Bounds = append(h.Bounds, le)
		}
		sort.Float64s(h.Bounds)
		for _, le := range h.Bounds {
			h.Counts = append(h.Counts, g.b[le])
		}
		out[k] = h
	}
	return out
}

// Delta is after − before, bucket by bucket (a group absent before counts from zero; a counter
// that went backwards, i.e. a restart, counts from zero too).
func Delta(after, before map[string]*Hist) map[string]*Hist {
	out := map[string]*Hist{}
	for k, a := range after {
		b := before[k]
		d := &Hist{Bounds: a.Bounds, Counts: make([]float64, len(a.Counts)), Sum: a.Sum}
		copy(d.Counts, a.Counts)
		if b != nil && len(b.Counts) == len(a.Counts) && b.Count() <= a.Count() {
			for i := range d.Counts {
				d.Counts[i] -= b.Counts[i]
			}
			d.Sum -= b.Sum
		}
		if d.Count() > 0 {
			out[k] = d
		}
	}
	return out
}
