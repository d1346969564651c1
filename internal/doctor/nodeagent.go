package doctor

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Node agents `doctor plan --node-agent` sizes for.
const (
	// NodeAgentKWOK: the plan's own per-node figures (design §5's watches per node, the
	// lease and node-status intervals, 4 writes and 4 Events per pod start), as before
	// --node-agent existed: what the demo's KWOK clusters are sized with.
	NodeAgentKWOK = "kwok"
	// NodeAgentKubelet: per-node and per-pod-start figures measured on hollow kubelets (the
	// kubelet's own code) by `meganode bench nodes` (NodeAgentFigures).
	NodeAgentKubelet = "kubelet"
)

// NodeAgentFigures are what one node agent costs the store and kube-apiserver, measured by
// `meganode bench nodes`: store writes per node per second in the steady window (every pod
// running) and per pod started (the pod phase's writes above the steady rate), each split as
// the plan splits its store loads (leases, events, pods, the rest); and watches per node.
type NodeAgentFigures struct {
	Agent                  string  `json:"agent"`
	Nodes                  int     `json:"nodes"` // the measured cluster's size
	LeaseWritesPerNodeSec  float64 `json:"lease_writes_per_node_sec"`
	EventWritesPerNodeSec  float64 `json:"event_writes_per_node_sec"`
	PodWritesPerNodeSec    float64 `json:"pod_writes_per_node_sec"`
	RestWritesPerNodeSec   float64 `json:"rest_writes_per_node_sec"`
	EventWritesPerPodStart float64 `json:"event_writes_per_pod_start"`
	PodWritesPerPodStart   float64 `json:"pod_writes_per_pod_start"`
	RestWritesPerPodStart  float64 `json:"rest_writes_per_pod_start"`
	WatchesPerNode         float64 `json:"watches_per_node"`
	WatchesBasis           string  `json:"watches_basis"`
	Source                 string  `json:"source"`
}

// DefaultKubeletSource names the run DefaultKubeletFigures come from.
const DefaultKubeletSource = "docs/bench/kubelets/side-by-side/meganode/report.json (`meganode bench nodes --kind both --nodes 200 --pods-per-node 5`, 2 cores, meganode-store)"

// DefaultKubeletFigures are NodeAgentFromReport of DefaultKubeletSource, rounded to 4
// decimals; TestDefaultKubeletFiguresAreTheCommittedRun keeps them equal to the file.
var DefaultKubeletFigures = NodeAgentFigures{
	Agent: NodeAgentKubelet, Nodes: 200,
	LeaseWritesPerNodeSec: 0.0985, EventWritesPerNodeSec: 0, PodWritesPerNodeSec: 0, RestWritesPerNodeSec: 0.0012,
	EventWritesPerPodStart: 4.216, PodWritesPerPodStart: 4.543, RestWritesPerPodStart: 0.1817,
	WatchesPerNode: 6.025, WatchesBasis: "(1324 watches with 200 hollow kubelets − 119 with 200 KWOK nodes) / 200",
	Source: "default: " + DefaultKubeletSource + "; pass --nodes-json with your own `meganode bench nodes` report.json",
}

// storeLoad is the plan's store load (leases, events, pods, rest) a resource's writes belong to.
func storeLoad(resource string) string {
	switch {
	case resource == "leases" || strings.HasPrefix(resource, "leases."):
		return "leases"
	case resource == "events" || strings.HasPrefix(resource, "events."):
		return "events"
	case resource == "pods":
		return "pods"
	}
	return "rest"
}

// nodesReport is the part of `meganode bench nodes`' report.json the plan reads (the
// report's type lives in internal/cluster, which imports this package).
type nodesReport struct {
	Runs []struct {
		Kind     string       `json:"kind"`
		Store    string       `json:"store"`
		Nodes    int          `json:"nodes"`
		Error    string       `json:"error"`
		PodPhase *nodesWindow `json:"pod_phase"`
		Steady   *nodesWindow `json:"steady"`
	} `json:"runs"`
}

type nodesWindow struct {
	Seconds       float64 `json:"seconds"`
	StoreRequests []struct {
		Operation string  `json:"operation"`
		Resource  string  `json:"resource"`
		PerSec    float64 `json:"per_sec"`
	} `json:"store_requests"`
	APIWatches float64 `json:"apiserver_watches"`
	SLO        *struct {
		Pods *struct {
			Running int `json:"running"`
		} `json:"pods"`
	} `json:"slo_report"`
}

// writesByLoad is the window's store writes per second by plan load.
func (w *nodesWindow) writesByLoad() map[string]float64 {
	out := map[string]float64{}
	for _, q := range w.StoreRequests {
		if q.Operation == "create" || q.Operation == "update" || q.Operation == "delete" {
			out[storeLoad(q.Resource)] += q.PerSec
		}
	}
	return out
}

// NodeAgentFromReport reads a `meganode bench nodes` report.json and returns the figures of
// its first complete kubelet run (on meganode-store when there are several). Watches per
// node are the kubelet run's watches on kube-apiserver less the KWOK run's on the same store
// (the control plane's own, and KWOK's few), over the nodes; without a KWOK run, all of them.
func NodeAgentFromReport(data []byte, source string) (NodeAgentFigures, error) {
	var rep nodesReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return NodeAgentFigures{}, fmt.Errorf("bench nodes JSON: %w", err)
	}
	ki, wi := -1, -1
	for i, r := range rep.Runs {
		if r.Error != "" || r.Steady == nil || r.PodPhase == nil || r.Nodes <= 0 {
			continue
		}
		if r.Kind == NodeAgentKubelet && (ki < 0 || (r.Store == "meganode" && rep.Runs[ki].Store != "meganode")) {
			ki = i
		}
	}
	if ki < 0 {
		return NodeAgentFigures{}, fmt.Errorf("bench nodes JSON: no complete kubelet run (runs[].kind \"kubelet\" with pod_phase and steady)")
	}
	k := rep.Runs[ki]
	for i, r := range rep.Runs {
		if r.Kind == NodeAgentKWOK && r.Store == k.Store && r.Error == "" && r.Steady != nil && r.Nodes == k.Nodes && wi < 0 {
			wi = i
		}
	}
	n := float64(k.Nodes)
	f := NodeAgentFigures{Agent: NodeAgentKubelet, Nodes: k.Nodes, Source: source}
	steady, pod := k.Steady.writesByLoad(), k.PodPhase.writesByLoad()
	f.LeaseWritesPerNodeSec = round4(steady["leases"] / n)
	f.EventWritesPerNodeSec = round4(steady["events"] / n)
	f.PodWritesPerNodeSec = round4(steady["pods"] / n)
	f.RestWritesPerNodeSec = round4(steady["rest"] / n)
	pods := 0.0
	if s := k.PodPhase.SLO; s != nil && s.Pods != nil {
		pods = float64(s.Pods.Running)
	}
	if pods > 0 {
		per := func(load string) float64 {
			return round4(math.Max(0, (pod[load]-steady[load])*k.PodPhase.Seconds/pods))
		}
		f.EventWritesPerPodStart, f.PodWritesPerPodStart, f.RestWritesPerPodStart = per("events"), per("pods"), per("rest")
	}
	f.WatchesPerNode = round4(k.Steady.APIWatches / n)
	f.WatchesBasis = fmt.Sprintf("%.0f watches on kube-apiserver with %d hollow kubelets / %d", k.Steady.APIWatches, k.Nodes, k.Nodes)
	if wi >= 0 {
		w := rep.Runs[wi].Steady.APIWatches
		f.WatchesPerNode = round4(math.Max(0, k.Steady.APIWatches-w) / n)
		f.WatchesBasis = fmt.Sprintf("(%.0f watches with %d hollow kubelets − %.0f with %d KWOK nodes) / %d", k.Steady.APIWatches, k.Nodes, w, k.Nodes, k.Nodes)
	}
	return f, nil
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// Text is the figures in one line, for the plan's FIGURES USED.
func (f NodeAgentFigures) Text() string {
	return fmt.Sprintf("per node: %.3g lease + %.3g event + %.3g pod + %.3g other store writes/s, %.3g watches; per pod start: %.3g event + %.3g pod + %.3g other writes",
		f.LeaseWritesPerNodeSec, f.EventWritesPerNodeSec, f.PodWritesPerNodeSec, f.RestWritesPerNodeSec, f.WatchesPerNode,
		f.EventWritesPerPodStart, f.PodWritesPerPodStart, f.RestWritesPerPodStart)
}
