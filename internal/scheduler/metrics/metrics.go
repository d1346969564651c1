// Package metrics holds the scheduler's counters and latency histograms, one set per component
// ("shard/3", "collector/0", "intake/1", "relay/d0-0", "webhook", "wire"), exported as text on
// /metrics and read by the simulator and the tests. Every role records into it, so it sits below
// all of them.
package metrics

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

// Counters are one component's named counters and latency histograms (e.g. "shard/3",
// "collector/0"). Everything is exported as text on /metrics and printed by `simulate`.
type Counters struct {
	mu    sync.Mutex
	c     map[string]*atomic.Int64
	hists map[string]*bench.Histogram
}

var registry sync.Map // name → *Counters

// For returns the counters of a component, creating them on first use.
func For(name string) *Counters {
	if v, ok := registry.Load(name); ok {
		return v.(*Counters)
	}
	v, _ := registry.LoadOrStore(name, &Counters{c: map[string]*atomic.Int64{}, hists: map[string]*bench.Histogram{}})
	return v.(*Counters)
}

// Add adds d to counter k.
func (m *Counters) Add(k string, d int64) {
	m.mu.Lock()
	v, ok := m.c[k]
	if !ok {
		v = &atomic.Int64{}
		m.c[k] = v
	}
	m.mu.Unlock()
	v.Add(d)
}

func (m *Counters) get(k string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.c[k]; ok {
		return v.Load()
	}
	return 0
}

// Declare creates counters at zero and histograms empty, so that their series are on /metrics
// from the start (a dashboard's query finds a conflict count of 0 rather than no series).
// Names already present keep their values.
func (m *Counters) Declare(counters []string, hists []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range counters {
		if _, ok := m.c[k]; !ok {
			m.c[k] = &atomic.Int64{}
		}
	}
	for _, k := range hists {
		if _, ok := m.hists[k]; !ok {
			m.hists[k] = bench.NewHistogram()
		}
	}
}

// Observe records d in histogram k.
func (m *Counters) Observe(k string, d time.Duration) {
	m.mu.Lock()
	h, ok := m.hists[k]
	if !ok {
		h = bench.NewHistogram()
		m.hists[k] = h
	}
	h.Record(d)
	m.mu.Unlock()
}

// Hist summarises histogram k (zero if nothing was observed).
func (m *Counters) Hist(k string) bench.Latency {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.hists[k]; ok {
		return h.Summary()
	}
	return bench.Latency{}
}

// Counter returns a counter of a component (tests and reports).
func Counter(component, name string) int64 { return For(component).get(name) }

// Reset clears every counter (simulator runs, tests).
func Reset() { registry.Range(func(k, _ any) bool { registry.Delete(k); return true }) }

// Write writes every counter and histogram in the Prometheus text format.
func Write(w io.Writer) {
	var names []string
	registry.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	sort.Strings(names)
	for _, n := range names {
		m := For(n)
		m.mu.Lock()
		var keys []string
		for k := range m.c {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "meganode_scheduler_%s{component=%q} %d\n", k, n, m.c[k].Load())
		}
		keys = keys[:0]
		for k := range m.hists {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := m.hists[k].Summary()
			fmt.Fprintf(w, "meganode_scheduler_%s_seconds{component=%q,quantile=\"0.5\"} %g\n", k, n, s.P50Us/1e6)
			fmt.Fprintf(w, "meganode_scheduler_%s_seconds{component=%q,quantile=\"0.99\"} %g\n", k, n, s.P99Us/1e6)
			fmt.Fprintf(w, "meganode_scheduler_%s_seconds_count{component=%q} %d\n", k, n, m.hists[k].Count())
		}
		m.mu.Unlock()
	}
}

// Micros is d in microseconds (the unit of the measured costs).
func Micros(d time.Duration) float64 { return float64(d) / 1e3 }
