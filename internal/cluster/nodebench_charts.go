package cluster

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"github.com/meganode/meganode/internal/bench"
)

// runColor: kubelet blue, KWOK green on meganode-store; on etcd red and gray.
func runColor(r *NodesRun) color.RGBA {
	switch {
	case r.Kind == AgentKubelet && r.Store == StoreEtcd:
		return colorRed
	case r.Kind == AgentKWOK && r.Store == StoreEtcd:
		return colorGray
	case r.Kind == AgentKWOK:
		return colorGreen
	}
	return colorBlue
}

var colorRed = rgba(0xd9, 0x48, 0x1c)

// charts draws the side-by-side charts with the repo's chart code (internal/bench/chart.go):
// one series per run over categories (resources, verbs, percentiles).
func (rep *NodesReport) charts() map[string]*bench.Chart {
	out := map[string]*bench.Chart{}
	num := func(v float64) string {
		if v != 0 && math.Abs(v) < 10 {
			return fmt.Sprintf("%.2g", v)
		}
		return fmt.Sprintf("%.0f", v)
	}
	// byKey makes a chart of the top categories (by their largest value over the runs).
	byKey := func(name, title, ylabel string, top int, get func(r *NodesRun) map[string]float64) {
		vals := map[string]map[string]float64{}
		per := make([]map[string]float64, len(rep.Runs))
		for i, r := range rep.Runs {
			per[i] = get(r)
			for k, v := range per[i] {
				if vals[k] == nil {
					vals[k] = map[string]float64{}
				}
				vals[k][r.Label()] = v
			}
		}
		keys := keysByMax(vals)
		if len(keys) == 0 {
			return
		}
		if len(keys) > top {
			keys = keys[:top]
		}
		// Only the resource's name on the axis (csidrivers, not csidrivers.storage.k8s.io): the
		// full names overlap at 800 pixels; the summary's tables keep them.
		c := &bench.Chart{Title: title, XLabel: "", YLabel: ylabel, Format: num}
		for _, k := range keys {
			short, _, _ := strings.Cut(k, ".")
			c.X = append(c.X, short)
		}
		for i, r := range rep.Runs {
			s := bench.Series{Name: r.Label(), Color: runColor(r)}
			for _, k := range keys {
				v, ok := per[i][k]
				if !ok {
					v = math.NaN()
				}
				s.Values = append(s.Values, v)
			}
			c.Series = append(c.Series, s)
		}
		out[name] = c
	}
	writes := func(w *NodesWindow) map[string]float64 {
		m := map[string]float64{}
		if w == nil {
			return m
		}
		for _, q := range w.StoreRequests {
			if storeWriteOps[q.Operation] {
				m[q.Resource] += q.PerSec
			}
		}
		return m
	}
	n := rep.Nodes
	byKey("store-writes-steady", fmt.Sprintf("store writes/s by resource, steady window (%d nodes)", n), "writes/s", 8,
		func(r *NodesRun) map[string]float64 { return writes(r.Steady) })
	byKey("store-writes-pod-phase", fmt.Sprintf("store writes/s by resource, pod phase (%d pods)", n*rep.PodsPerNode), "writes/s", 8,
		func(r *NodesRun) map[string]float64 { return writes(r.PodPhase) })
	byKey("store-requests-by-operation", "store requests/s by operation, steady window", "requests/s", 8, func(r *NodesRun) map[string]float64 {
		m := map[string]float64{}
		if r.Steady != nil {
			for _, q := range r.Steady.StoreRequests {
				m[q.Operation] += q.PerSec
			}
		}
		return m
	})
	counts := func(cs []Count) map[string]float64 {
		m := map[string]float64{}
		for _, c := range cs {
			m[c.Resource] = c.Value
		}
		return m
	}
	byKey("apiserver-watches", "watches open on kube-apiserver by resource (top 6)", "watches", 6, func(r *NodesRun) map[string]float64 {
		if r.Steady == nil {
			return nil
		}
		return counts(r.Steady.APIWatchesByResource)
	})
	byKey("store-keys", "store keys by resource", "keys", 8, func(r *NodesRun) map[string]float64 {
		m := map[string]float64{}
		for _, k := range r.Keys {
			m[k.Resource] = float64(k.Keys)
		}
		return m
	})
	byKey("store-bytes", "store bytes by resource, KiB", "KiB", 8, func(r *NodesRun) map[string]float64 {
		m := map[string]float64{}
		for _, k := range r.Keys {
			m[k.Resource] = float64(k.Bytes) / 1024
		}
		return m
	})
	byKey("cpu", "CPU, cores (steady window, pod phase)", "cores", 8, func(r *NodesRun) map[string]float64 {
		m := map[string]float64{}
		if w := r.Steady; w != nil {
			m["kube-apiserver steady"], m["store steady"] = w.APIServer.CPUPercent/100, w.Store.CPUPercent/100
		}
		if w := r.PodPhase; w != nil {
			m["kube-apiserver pod phase"], m["store pod phase"] = w.APIServer.CPUPercent/100, w.Store.CPUPercent/100
		}
		return m
	})
	byKey("rss", "resident memory at the end of the steady window, MiB", "MiB", 4, func(r *NodesRun) map[string]float64 {
		if r.Steady == nil {
			return nil
		}
		return map[string]float64{"kube-apiserver": r.Steady.APIServer.RSSMiB, "store": r.Steady.Store.RSSMiB}
	})
	byKey("api-p99-by-verb", "API p99 per verb, pod phase, ms", "ms", 10, func(r *NodesRun) map[string]float64 {
		m := map[string]float64{}
		if r.PodPhase != nil && r.PodPhase.SLO != nil {
			for _, a := range r.PodPhase.SLO.APIByVerb {
				m[a.Verb] = a.P99 * 1e3
			}
		}
		return m
	})
	// Percentiles keep their order (not by value).
	c := &bench.Chart{Title: "pod startup latency (create → Running), ms", XLabel: "percentile", YLabel: "ms", Format: num,
		X: []string{"p50", "p90", "p99", "max"}}
	for _, r := range rep.Runs {
		if r.PodPhase == nil || r.PodPhase.SLO == nil || r.PodPhase.SLO.Pods == nil {
			continue
		}
		l := r.PodPhase.SLO.Pods.Startup
		c.Series = append(c.Series, bench.Series{Name: r.Label(), Color: runColor(r), Values: []float64{l.P50Us / 1e3, l.P90Us / 1e3, l.P99Us / 1e3, l.MaxUs / 1e3}})
	}
	if len(c.Series) > 0 {
		out["pod-startup"] = c
	}
	return out
}
