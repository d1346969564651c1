package cluster

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A run stopped in its nodes phase has its later figures missing: printed "missing" and null
// in report.json, never 0; the stack's largest size held and what stopped it are the runs'.
func TestScaleReportMissingNotZero(t *testing.T) {
	r := &ScaleReport{Cores: 2, Sizes: []int{10, 20}, PodsPerNode: 1, LeasePolicy: "test"}
	held := ScaleRun{Stack: StackMeganode, Nodes: 10, Pods: 10, Held: true, NodesReadySeconds: ptr(1.5), PodsPlacedSeconds: ptr(2),
		PodsPerSec: ptr(5), PodsBound: 10, BindingsOK: ptr(10), LeaseRenewalsPerSec: ptr(1)}
	held.SetVerbs(&Report{APIByVerb: []APILatency{{Verb: "POST", Count: 20, P99: 0.2}, {Verb: "LIST", Count: 2, P99: 31}}})
	stopped := ScaleRun{Stack: StackMeganode, Nodes: 20, Pods: 20, Stop: StopTimeout, Phase: "nodes", Error: "5 of 20 nodes Ready after 1s"}
	r.Add(held)
	r.Add(stopped)
	if s := r.Stacks[0]; s.LargestHeld == nil || *s.LargestHeld != 10 || s.StoppedAt == nil || *s.StoppedAt != 20 || !strings.HasPrefix(s.StoppedBy, StopTimeout) {
		t.Fatalf("stack: %+v", s)
	}
	if r.Stacks[0].Runs[0].APISLOMet == nil || *r.Stacks[0].Runs[0].APISLOMet {
		t.Errorf("a LIST p99 of 31 s must miss the 30 s SLO: %+v", r.Stacks[0].Runs[0].APIByVerb)
	}
	var buf bytes.Buffer
	r.Summary(&buf)
	out := buf.String()
	for _, label := range []string{"all nodes Ready with Lease (s)", "all pods placed (s)", "pods/s**", "API p99 POST"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, label) {
				line = l
			}
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("row %q not in the summary:\n%s", label, out)
		}
		if got := strings.TrimSpace(cells[3]); got != Missing {
			t.Errorf("row %q of the stopped run: %q, want %q", label, got, Missing)
		}
		if got := strings.TrimSpace(cells[2]); got == Missing || got == "0" {
			t.Errorf("row %q of the held run: %q", label, got)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Stacks []struct {
			Runs []map[string]any `json:"runs"`
		} `json:"stacks"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	run := back.Stacks[0].Runs[1]
	for _, k := range []string{"nodes_ready_seconds", "pods_placed_seconds", "pods_per_sec", "bindings_ok", "lease_renewals_per_sec", "api_slo_met"} {
		if v, ok := run[k]; !ok || v != nil {
			t.Errorf("%s of the stopped run: %v (present %v), want null", k, v, ok)
		}
	}
}
