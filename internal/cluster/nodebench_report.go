package cluster

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// NodesReport is `bench nodes`' side-by-side report: one run per kind (and store).
type NodesReport struct {
	Command       []string    `json:"command"`
	Start         time.Time   `json:"start"`
	Cores         int         `json:"cores"`
	Nodes         int         `json:"nodes"`
	PodsPerNode   int         `json:"pods_per_node"`
	Store         string      `json:"store"`
	WindowSeconds float64     `json:"window_seconds"`
	CreateQPS     float64     `json:"create_qps"`
	Runs          []*NodesRun `json:"runs"`
	Ratios        []Ratio     `json:"ratios"` // kubelet / KWOK on the same store
}

// PerNode is a run's figures divided by its node count: what one node of this kind costs
// the control plane. They include the control plane's own share (controllers, scheduler,
// leader-election leases), which is why KWOK's are not zero where KWOK does nothing.
type PerNode struct {
	// Steady window, per node.
	StoreWritesPerSec           float64            `json:"store_writes_per_sec"`
	StoreWritesByResourcePerSec map[string]float64 `json:"store_writes_per_sec_by_resource"`
	APIRequestsPerSec           float64            `json:"apiserver_requests_per_sec"`
	APIWatches                  float64            `json:"apiserver_watches"`
	EventsPerSec                float64            `json:"events_per_sec"`
	APIServerCPUMillicores      float64            `json:"apiserver_cpu_millicores"`
	APIServerRSSKiB             float64            `json:"apiserver_rss_kib"`
	StoreCPUMillicores          float64            `json:"store_cpu_millicores"`
	// Pod phase: per pod started (the phase's writes above the steady rate), and Events/s per
	// node while the pods started.
	StoreWritesPerPodStart    float64 `json:"store_writes_per_pod_start"`
	PodWritesPerPodStart      float64 `json:"pod_writes_per_pod_start"` // the pods resource's share
	EventsPerPodStart         float64 `json:"events_per_pod_start"`
	PodPhaseEventsPerNodeSec  float64 `json:"pod_phase_events_per_sec"`
	PodPhaseStoreWritesPerSec float64 `json:"pod_phase_store_writes_per_sec"`
}

// Ratio is one figure of the kubelet run over the KWOK run's on the same store.
type Ratio struct {
	Figure  string  `json:"figure"`
	Store   string  `json:"store"`
	Kubelet float64 `json:"kubelet"`
	KWOK    float64 `json:"kwok"`
	Ratio   float64 `json:"ratio"`
}

func perNode(r *NodesRun) *PerNode {
	if r.Steady == nil || r.PodPhase == nil || r.Nodes == 0 {
		return nil
	}
	n, s, p := float64(r.Nodes), r.Steady, r.PodPhase
	out := &PerNode{StoreWritesPerSec: s.StoreWritesPerSec / n, StoreWritesByResourcePerSec: map[string]float64{},
		APIRequestsPerSec: s.APIRequestsPerSec / n, APIWatches: s.APIWatches / n, EventsPerSec: s.EventsPerSec / n,
		APIServerCPUMillicores: 10 * s.APIServer.CPUPercent / n, APIServerRSSKiB: 1024 * s.APIServer.RSSMiB / n,
		StoreCPUMillicores: 10 * s.Store.CPUPercent / n, PodPhaseEventsPerNodeSec: p.EventsPerSec / n,
		PodPhaseStoreWritesPerSec: p.StoreWritesPerSec / n}
	for _, q := range s.StoreRequests {
		if storeWriteOps[q.Operation] {
			out.StoreWritesByResourcePerSec[q.Resource] += q.PerSec / n
		}
	}
	pods := float64(r.Nodes * r.PodsPerNode)
	if p.SLO != nil && p.SLO.Pods != nil && p.SLO.Pods.Running > 0 {
		pods = float64(p.SLO.Pods.Running)
	}
	if pods > 0 {
		out.StoreWritesPerPodStart = math.Max(0, (p.StoreWritesPerSec-s.StoreWritesPerSec)*p.Seconds/pods)
		out.EventsPerPodStart = math.Max(0, (p.EventsPerSec-s.EventsPerSec)*p.Seconds/pods)
		out.PodWritesPerPodStart = math.Max(0, (resourceWrites(p, "pods")-resourceWrites(s, "pods"))*p.Seconds/pods)
	}
	return out
}

// resourceWrites is a window's store writes per second on one resource.
func resourceWrites(w *NodesWindow, res string) float64 {
	t := 0.0
	for _, q := range w.StoreRequests {
		if q.Resource == res && storeWriteOps[q.Operation] {
			t += q.PerSec
		}
	}
	return t
}

// computeRatios fills Ratios: for each store with a kubelet and a KWOK run, each summary
// figure of the one over the other's.
func (rep *NodesReport) computeRatios() {
	rep.Ratios = nil
	rows := rep.rows()
	for _, store := range []string{StoreMeganode, StoreEtcd} {
		ki, wi := -1, -1
		for i, r := range rep.Runs {
			if r.Store != store || r.Error != "" {
				continue
			}
			switch r.Kind {
			case AgentKubelet:
				ki = i
			case AgentKWOK:
				wi = i
			}
		}
		if ki < 0 || wi < 0 {
			continue
		}
		for _, row := range rows {
			k, w := row.values[ki], row.values[wi]
			if k == nil || w == nil || *w == 0 || !row.ratio {
				continue
			}
			rep.Ratios = append(rep.Ratios, Ratio{Figure: row.section + ": " + row.name, Store: store, Kubelet: *k, KWOK: *w, Ratio: *k / *w})
		}
	}
}

// WriteFiles writes report.json, summary.md and the charts into dir.
func (rep *NodesReport) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rep.computeRatios()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	files := []string{filepath.Join(dir, "report.json"), filepath.Join(dir, "summary.md")}
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		return nil, err
	}
	f, err := os.Create(files[1])
	if err != nil {
		return nil, err
	}
	rep.WriteSummary(f)
	if err := f.Close(); err != nil {
		return nil, err
	}
	pngs, err := writeCharts(dir, rep.charts())
	return append(files, pngs...), err
}

// ReadNodesReport reads a report.json of `bench nodes`.
func ReadNodesReport(path string) (*NodesReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep NodesReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}
