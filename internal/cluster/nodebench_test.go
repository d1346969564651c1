package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyResource(t *testing.T) {
	for k, want := range map[string]string{
		"/registry/pods/ns/p":                                  "pods",
		"/registry/minions/n1":                                 "nodes",
		"/registry/leases/kube-node-lease/n1":                  "leases",
		"/registry/apiregistration.k8s.io/apiservices/v1.apps": "apiservices.apiregistration.k8s.io",
		"/registry/ranges/serviceips":                          "ranges",
	} {
		if got := KeyResource(k); got != want {
			t.Errorf("KeyResource(%q) = %q, want %q", k, got, want)
		}
	}
}

// nodesRun is a run with the figures the report derives from.
func nodesRun(kind string, writes, watches, events float64) *NodesRun {
	return &NodesRun{Kind: kind, Store: StoreMeganode, Nodes: 10, PodsPerNode: 2, UpSeconds: 5, ProcessesLeft: []string{},
		PodPhase: &NodesWindow{Seconds: 10, StoreWritesPerSec: 10 * writes, EventsPerSec: events, EventsWritten: 10 * events,
			StoreRequests: []StoreRequest{{Operation: "update", Resource: "pods", PerSec: 5 * writes}, {Operation: "create", Resource: "pods", PerSec: 2}},
			APIServer:     Usage{CPUPercent: 50}, SLO: &Report{Pods: &PodRun{Running: 20}}},
		Steady: &NodesWindow{Seconds: 60, StoreWritesPerSec: writes, APIWatches: watches, APIWatchesByResource: []Count{{Resource: "pods", Value: watches}},
			StoreRequests: []StoreRequest{{Operation: "update", Resource: "leases.coordination.k8s.io", PerSec: writes}},
			APIServer:     Usage{CPUPercent: 10, RSSMiB: 400}, Store: Usage{CPUPercent: 1, RSSMiB: 20}},
		Keys: []KeyCount{{Resource: "events", Keys: int64(events), Bytes: 1000}, {Resource: "pods", Keys: 20, Bytes: 50000}},
	}
}

func TestNodesReport(t *testing.T) {
	rep := &NodesReport{Nodes: 10, PodsPerNode: 2, Store: StoreMeganode, WindowSeconds: 60, CreateQPS: 20, Cores: 2,
		Command: []string{"meganode", "bench", "nodes"},
		Runs:    []*NodesRun{nodesRun(AgentKubelet, 3, 120, 8), nodesRun(AgentKWOK, 2, 40, 2)}}
	for _, r := range rep.Runs {
		r.PerNode = perNode(r)
	}
	k := rep.Runs[0].PerNode
	// (pod phase 30/s − steady 3/s) × 10 s / 20 pods; pods: (15 + 2 − 0) × 10 / 20.
	if k.StoreWritesPerSec != 0.3 || k.APIWatches != 12 || k.StoreWritesPerPodStart != 13.5 || k.PodWritesPerPodStart != 8.5 || k.EventsPerPodStart != 4 ||
		k.StoreWritesByResourcePerSec["leases.coordination.k8s.io"] != 0.3 || k.APIServerCPUMillicores != 10 {
		t.Errorf("per node %+v", k)
	}
	dir := t.TempDir()
	files, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Errorf("files %v", files)
	}
	var watches *Ratio
	for i, r := range rep.Ratios {
		if r.Figure == "steady window (every pod Running): watches on kube-apiserver" {
			watches = &rep.Ratios[i]
		}
	}
	if watches == nil || watches.Ratio != 3 || watches.Kubelet != 120 || watches.KWOK != 40 {
		t.Errorf("watches ratio %+v in %+v", watches, rep.Ratios)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"| watches on kube-apiserver | 120 | 40 | 3.00× |", "kubelet / KWOK (meganode)", "| update leases.coordination.k8s.io | 3.00 | 2.00 |",
		"| events | 8 (1000 B) | 2 (1000 B) |", "| processes left after down | 0 | 0 | |"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("summary lacks %q:\n%s", w, b)
		}
	}
	back, err := ReadNodesReport(filepath.Join(dir, "report.json"))
	if err != nil || len(back.Runs) != 2 || back.Runs[0].PerNode == nil || back.Runs[0].PerNode.APIWatches != 12 {
		t.Errorf("report.json round trip: %v %+v", err, back)
	}
}
