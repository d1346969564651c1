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
// The bench format is owned by `meganode bench` (issue 4), so this is tolerant:
// it walks the whole document and takes every object that carries a throughput
// field (ops_per_sec, ops_per_second, ops_s, throughput, writes_per_sec,
// puts_per_sec) as a run, labelled by its workload (workload|name|benchmark|kind)
// and target (target|server|store) fields, which may also be inherited from
// enclosing objects. It prefers lease-flood (the apiserver's lease Txn, the
// dominant write at scale), then put; and meganode over etcd; and takes the
// highest figure among the preferred runs.
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
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if a.workloadRank() != b.workloadRank() {
			return a.workloadRank() < b.workloadRank()
		}
		if a.targetRank() != b.targetRank() {
			return a.targetRank() < b.targetRank()
		}
		return a.ops > b.ops
	})
	r := runs[0]
	desc := fmt.Sprintf("measured: %.0f ops/s", r.ops)
	var what []string
	if r.workload != "" {
		what = append(what, r.workload)
	}
	if r.target != "" {
		what = append(what, "on "+r.target)
	}
	if len(what) > 0 {
		desc += " (" + strings.Join(what, " ") + ")"
	}
	desc += fmt.Sprintf(" from bench JSON, best of %d run(s) considered", len(runs))
	return r.ops, desc, nil
}

type benchRun struct {
	workload, target string
	ops              float64
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
