package doctor

import (
	"math"
	"strings"
	"testing"
)

// A `bench nodes` report.json cut down to what the plan reads: 10 kubelets and 10 KWOK nodes,
// 100 pods started in a 10 s pod phase.
const nodesReportJSON = `{"runs":[
 {"kind":"kwok","store":"meganode","nodes":10,
  "pod_phase":{"seconds":10,"store_requests":[{"operation":"create","resource":"events","per_sec":10}],"apiserver_watches":100,"slo_report":{"pods":{"running":100}}},
  "steady":{"seconds":60,"store_requests":[{"operation":"update","resource":"leases.coordination.k8s.io","per_sec":1}],"apiserver_watches":100}},
 {"kind":"kubelet","store":"etcd","nodes":10,"error":"up: failed"},
 {"kind":"kubelet","store":"meganode","nodes":10,
  "pod_phase":{"seconds":10,"store_requests":[
    {"operation":"create","resource":"events","per_sec":42},
    {"operation":"update","resource":"pods","per_sec":51},
    {"operation":"create","resource":"pods","per_sec":10},
    {"operation":"get","resource":"pods","per_sec":50},
    {"operation":"update","resource":"nodes","per_sec":3},
    {"operation":"update","resource":"leases.coordination.k8s.io","per_sec":1}],
   "apiserver_watches":160,"slo_report":{"pods":{"running":100}}},
  "steady":{"seconds":60,"store_requests":[
    {"operation":"update","resource":"leases.coordination.k8s.io","per_sec":1},
    {"operation":"update","resource":"nodes","per_sec":0.5},
    {"operation":"update","resource":"pods","per_sec":1},
    {"operation":"create","resource":"events.events.k8s.io","per_sec":0.2},
    {"operation":"list","resource":"pods","per_sec":9}],
   "apiserver_watches":180}}]}`

func TestNodeAgentFromReport(t *testing.T) {
	f, err := NodeAgentFromReport([]byte(nodesReportJSON), "measured: r.json")
	if err != nil {
		t.Fatal(err)
	}
	want := NodeAgentFigures{Agent: NodeAgentKubelet, Nodes: 10, Source: "measured: r.json",
		LeaseWritesPerNodeSec: 0.1, EventWritesPerNodeSec: 0.02, PodWritesPerNodeSec: 0.1, RestWritesPerNodeSec: 0.05,
		// (pod phase − steady) × 10 s / 100 pods: events (42 − 0.2), pods (61 − 1), rest (3 − 0.5).
		EventWritesPerPodStart: 4.18, PodWritesPerPodStart: 6, RestWritesPerPodStart: 0.25,
		WatchesPerNode: 8, // (180 − KWOK's 100) / 10
	}
	want.WatchesBasis = f.WatchesBasis
	if f != want {
		t.Errorf("figures\n%+v\nwant\n%+v", f, want)
	}
	if !strings.Contains(f.WatchesBasis, "180") || !strings.Contains(f.WatchesBasis, "KWOK") {
		t.Errorf("watches basis %q", f.WatchesBasis)
	}
	for _, bad := range []string{`nope`, `{"runs":[{"kind":"kwok","nodes":1,"steady":{},"pod_phase":{}}]}`, `{"runs":[{"kind":"kubelet","nodes":1,"error":"x"}]}`} {
		if _, err := NodeAgentFromReport([]byte(bad), "x"); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestPlanNodeAgentKubelet(t *testing.T) {
	in := PlanInput{Nodes: 1000, Pods: 6000, ScheduleSeconds: 60} // 100 pods/s
	kwok := Plan(in)
	f, err := NodeAgentFromReport([]byte(nodesReportJSON), "measured: r.json")
	if err != nil {
		t.Fatal(err)
	}
	in.NodeAgent = &f
	kub := Plan(in)
	load := func(p PlanOutput, res string) WriteLoad {
		for _, l := range p.Store.Loads {
			if l.Resource == res {
				return l
			}
		}
		t.Fatalf("no %s load", res)
		return WriteLoad{}
	}
	// Leases keep the lease formula; the other loads are measured per node and per pod start.
	if a, b := load(kwok, "leases").WritesPerSec, load(kub, "leases").WritesPerSec; a != b || a != 100 {
		t.Errorf("leases %v vs %v, want 100 both", a, b)
	}
	for _, c := range []struct {
		res  string
		want float64
	}{{"events", 0.02*1000 + 4.18*100}, {"pods", 0.1*1000 + 6*100}, {"rest", 0.05*1000 + 0.25*100}} {
		l := load(kub, c.res)
		if math.Abs(l.WritesPerSec-c.want) > 1e-9 || !strings.Contains(l.Basis, "kubelet, measured") {
			t.Errorf("%s: %+v, want %.2f writes/s", c.res, l, c.want)
		}
	}
	if kwok.APIServer.WatchesPerNode != WatchesPerNode || kwok.APIServer.WatchesPerAPIServer != 3600 {
		t.Errorf("kwok watches: %v per node, %d per apiserver", kwok.APIServer.WatchesPerNode, kwok.APIServer.WatchesPerAPIServer)
	}
	if kub.APIServer.WatchesPerNode != 8 || kub.APIServer.WatchesPerAPIServer != 1600 { // 8 × 1000 / 5 apiservers
		t.Errorf("kubelet watches: %v per node, %d per apiserver", kub.APIServer.WatchesPerNode, kub.APIServer.WatchesPerAPIServer)
	}
	if kub.Store.TotalWritesPerSec <= kwok.Store.TotalWritesPerSec {
		t.Errorf("kubelet store writes %.0f/s ≤ KWOK's %.0f/s", kub.Store.TotalWritesPerSec, kwok.Store.TotalWritesPerSec)
	}
	var sb strings.Builder
	kub.WriteTable(&sb)
	if !strings.Contains(sb.String(), "node agent: kubelet") || !strings.Contains(sb.String(), "measured: r.json") || !strings.Contains(sb.String(), "8 watches per node") {
		t.Errorf("table lacks the node agent figure:\n%s", sb.String())
	}
	for _, f := range kwok.Figures {
		if strings.Contains(f.Lines, "node agent") {
			t.Errorf("kwok plan lists a node agent figure: %+v", f)
		}
	}
}

func TestDefaultKubeletFiguresAreTheCommittedRun(t *testing.T) {
	f, err := NodeAgentFromReport(readTestdata(t, "../../docs/bench/kubelets/side-by-side/meganode/report.json"), DefaultKubeletFigures.Source)
	if err != nil {
		t.Fatal(err)
	}
	if f != DefaultKubeletFigures {
		t.Errorf("docs/bench/kubelets/side-by-side/meganode/report.json gives\n%#v\nDefaultKubeletFigures is\n%#v", f, DefaultKubeletFigures)
	}
}
