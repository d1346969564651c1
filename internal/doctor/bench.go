package doctor

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// StoreThroughput reads a `meganode bench` JSON result and returns the store
// write throughput to plan with, and a description of where it came from.
//
// It is tolerant of the format: it walks the whole document and takes every
// object that carries a throughput field (ops_per_sec, ops_per_second, ops_s,
// throughput, writes_per_sec, puts_per_sec) as a run, labelled by its workload
// (workload|name|benchmark|kind), target (target|server|store), label and
// clients fields, which may also be inherited from enclosing objects. Runs that
// differ only in their round are one configuration, whose figure is the median
// over its rounds (as docs/benchmarks.md shows them). It prefers lease-flood (the
// apiserver's lease Txn, the dominant write at scale), then put; and meganode
// over etcd; and takes the configuration with the highest median.
func StoreThroughput(data []byte) (float64, string, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return 0, "", fmt.Errorf("bench JSON: %w", err)
	}
	var runs []benchRun
	walkBench(doc, benchRun{}, &runs)
	if len(runs) == 0 {
		return 0, "", fmt.Errorf("bench JSON: no run with a throughput field (ops_per_sec, throughput, ...)")
	}
	// One configuration per workload, label, target and clients: the median of its rounds.
	type group struct {
		r   benchRun
		ops []float64
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range runs {
		k := fmt.Sprintf("%s\x00%s\x00%s\x00%g", r.workload, r.label, r.target, r.clients)
		g, ok := groups[k]
		if !ok {
			g = &group{r: r}
			groups[k] = g
			order = append(order, k)
		}
		g.ops = append(g.ops, r.ops)
	}
	confs := make([]benchRun, 0, len(order))
	rounds := map[int]int{}
	for i, k := range order {
		g := groups[k]
		r := g.r
		r.ops = medianOf(g.ops)
		r.idx = i
		rounds[i] = len(g.ops)
		confs = append(confs, r)
	}
	sort.SliceStable(confs, func(i, j int) bool {
		a, b := confs[i], confs[j]
		if a.workloadRank() != b.workloadRank() {
			return a.workloadRank() < b.workloadRank()
		}
		if a.targetRank() != b.targetRank() {
			return a.targetRank() < b.targetRank()
		}
		return a.ops > b.ops
	})
	r := confs[0]
	desc := fmt.Sprintf("measured: %.0f ops/s", r.ops)
	var what []string
	if r.workload != "" {
		what = append(what, r.workload)
	}
	if r.label != "" {
		what = append(what, r.label)
	}
	if r.target != "" {
		what = append(what, "on "+r.target)
	}
	if r.clients > 0 {
		what = append(what, fmt.Sprintf("at %g clients", r.clients))
	}
	if len(what) > 0 {
		desc += " (" + strings.Join(what, " ") + ")"
	}
	if n := rounds[r.idx]; n > 1 {
		desc += fmt.Sprintf(", median of %d rounds", n)
	}
	desc += fmt.Sprintf(", the best of %d configuration(s) in the bench JSON", len(confs))
	return r.ops, desc, nil
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type benchRun struct {
	workload, target, label string
	clients, ops            float64
	idx                     int
}

func (r benchRun) workloadRank() int {
	w := strings.ToLower(r.workload)
	switch {
	case strings.Contains(w, "lease"):
		return 0
	case strings.Contains(w, "put"):
		return 1
	case w == "":
		return 2
	}
	return 3
}

func (r benchRun) targetRank() int {
	t := strings.ToLower(r.target)
	switch {
	case strings.Contains(t, "meganode"):
		return 0
	case t == "":
		return 1
	}
	return 2
}

var (
	benchOpsKeys      = []string{"ops_per_sec", "ops_per_second", "ops_s", "opsPerSec", "throughput", "writes_per_sec", "puts_per_sec"}
	benchWorkloadKeys = []string{"workload", "name", "benchmark", "kind"}
	benchTargetKeys   = []string{"target", "server", "store"}
)

func walkBench(v any, ctx benchRun, runs *[]benchRun) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walkBench(e, ctx, runs)
		}
	case map[string]any:
		for _, k := range benchWorkloadKeys {
			if s, ok := x[k].(string); ok && s != "" {
				ctx.workload = s
				break
			}
		}
		for _, k := range benchTargetKeys {
			if s, ok := x[k].(string); ok && s != "" {
				ctx.target = s
				break
			}
		}
		if s, ok := x["label"].(string); ok && s != "" {
			ctx.label = s
		}
		if c, ok := x["clients"].(float64); ok && c > 0 {
			ctx.clients = c
		}
		for _, k := range benchOpsKeys {
			if f, ok := x[k].(float64); ok && f > 0 {
				r := ctx
				r.ops = f
				*runs = append(*runs, r)
				break
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch x[k].(type) {
			case map[string]any, []any:
				walkBench(x[k], ctx, runs)
			}
		}
	}
}
