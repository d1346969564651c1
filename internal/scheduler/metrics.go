package scheduler

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

// counters are one component's named counters and latency histograms (e.g. "shard/3",
// "collector/0"). Everything is exported as text on /metrics and printed by `simulate`.
type counters struct {
	mu    sync.Mutex
	c     map[string]*atomic.Int64
	hists map[string]*bench.Histogram
}

var registry sync.Map // name → *counters

func metricsFor(name string) *counters {
	if v, ok := registry.Load(name); ok {
		return v.(*counters)
	}
	v, _ := registry.LoadOrStore(name, &counters{c: map[string]*atomic.Int64{}, hists: map[string]*bench.Histogram{}})
	return v.(*counters)
}

func (m *counters) add(k string, d int64) {
	m.mu.Lock()
	v, ok := m.c[k]
	if !ok {
		v = &atomic.Int64{}
		m.c[k] = v
	}
	m.mu.Unlock()
	v.Add(d)
}

func (m *counters) get(k string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.c[k]; ok {
		return v.Load()
	}
	return 0
}

func (m *counters) observe(k string, d time.Duration) {
	m.mu.Lock()
	h, ok := m.hists[k]
	if !ok {
		h = bench.NewHistogram()
		m.hists[k] = h
	}
	h.Record(d)
	m.mu.Unlock()
}

func (m *counters) hist(k string) bench.Latency {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.hists[k]; ok {
		return h.Summary()
	}
	return bench.Latency{}
}

// Counter returns a counter of a component (tests and reports).
func Counter(component, name string) int64 { return metricsFor(component).get(name) }

// ResetMetrics clears every counter (simulator runs, tests).
func ResetMetrics() { registry.Range(func(k, _ any) bool { registry.Delete(k); return true }) }

// WriteMetrics writes every counter and histogram in the Prometheus text format.
func WriteMetrics(w io.Writer) {
	var names []string
	registry.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	sort.Strings(names)
	for _, n := range names {
		m := metricsFor(n)
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
