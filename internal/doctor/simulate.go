package doctor

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The scheduler's size comes from `meganode scheduler simulate --json`: its projection gives,
// for each shape (shards S, scatter d, pods evaluated at once per shard K, batch size), the
// seconds a discrete-event model fed with per-pod costs measured on this code takes to place
// the target pods on the target nodes, and the cores it uses (S·K + collectors).

// SimProjection is one projected shape of a simulate run.
type SimProjection struct {
	Shards     int     `json:"shards"`
	D          int     `json:"d"`
	K          int     `json:"k"`
	Batch      int     `json:"batch"`
	Collectors int     `json:"collectors"`
	Costs      string  `json:"costs"` // "shared (...)" or "alone (...)": how the per-pod costs were measured
	Nodes      int     `json:"nodes"`
	Pods       int     `json:"pods"`
	Seconds    float64 `json:"seconds"`
	Cores      int     `json:"cores"`
}

// SimModelMargin multiplies the model's seconds: against in-process runs the model
// under-predicted by 4–25 % in the modes it validates (internal/scheduler/NOTES.md, the 100K
// and 50K validations), so the plan adds 25 %.
const SimModelMargin = 1.25

// DefaultSimSource names the committed run the defaults below come from.
const DefaultSimSource = "docs/bench/scheduler-sim/run-100k.json (2026-11-25, 2 cores; costs measured shared, 16 shards on 2 cores)"

// DefaultSimProjections are the shared-cost projections of DefaultSimSource: 1M pods on 1M
// nodes, 16 collectors, dedicated cores. TestDefaultSimProjectionsAreTheCommittedRun keeps
// them equal to the file.
var DefaultSimProjections = []SimProjection{
	{Shards: 256, D: 2, K: 1, Batch: 1, Seconds: 70.181, Cores: 272},
	{Shards: 256, D: 2, K: 1, Batch: 32, Seconds: 2.53, Cores: 272},
	{Shards: 256, D: 2, K: 4, Batch: 1, Seconds: 17.554, Cores: 1040},
	{Shards: 256, D: 2, K: 4, Batch: 32, Seconds: 1.141, Cores: 1040},
	{Shards: 256, D: 4, K: 1, Batch: 1, Seconds: 119.448, Cores: 272},
	{Shards: 256, D: 4, K: 1, Batch: 32, Seconds: 4.814, Cores: 272},
	{Shards: 256, D: 4, K: 4, Batch: 1, Seconds: 29.875, Cores: 1040},
	{Shards: 256, D: 4, K: 4, Batch: 32, Seconds: 1.207, Cores: 1040},
	{Shards: 1024, D: 2, K: 1, Batch: 1, Seconds: 3.24, Cores: 1040},
	{Shards: 1024, D: 2, K: 1, Batch: 32, Seconds: 0.6, Cores: 1040},
	{Shards: 1024, D: 2, K: 4, Batch: 1, Seconds: 1.391, Cores: 4112},
	{Shards: 1024, D: 2, K: 4, Batch: 32, Seconds: 0.556, Cores: 4112},
	{Shards: 1024, D: 4, K: 1, Batch: 1, Seconds: 6.799, Cores: 1040},
	{Shards: 1024, D: 4, K: 1, Batch: 32, Seconds: 0.492, Cores: 1040},
	{Shards: 1024, D: 4, K: 4, Batch: 1, Seconds: 2.605, Cores: 4112},
	{Shards: 1024, D: 4, K: 4, Batch: 32, Seconds: 0.467, Cores: 4112},
}

func init() {
	for i := range DefaultSimProjections {
		p := &DefaultSimProjections[i]
		p.Collectors, p.Nodes, p.Pods, p.Costs = 16, 1_000_000, 1_000_000, "shared (16 shards on 2 cores)"
	}
}

// SimulateProjections reads `meganode scheduler simulate --json` output. The target node
// count is the command's --target-nodes (simulate's default, 1M, when absent).
func SimulateProjections(data []byte) ([]SimProjection, error) {
	var doc struct {
		Command    []string `json:"command"`
		Projection []struct {
			Shards, D, K, Batch int
			Costs               string `json:"costs"`
			Result              struct {
				Input struct {
					Pods       int `json:"pods"`
					Collectors int `json:"collectors"`
				} `json:"input"`
				Seconds float64 `json:"seconds"`
				Cores   int     `json:"cores"`
			} `json:"result"`
		} `json:"projection"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("simulate JSON: %w", err)
	}
	nodes := 1_000_000
	for i, a := range doc.Command {
		v, ok := strings.CutPrefix(a, "--target-nodes=")
		if !ok && (a == "--target-nodes" || a == "-target-nodes") && i+1 < len(doc.Command) {
			v, ok = doc.Command[i+1], true
		}
		if ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("simulate JSON: command's --target-nodes %q", v)
			}
			nodes = n
		}
	}
	var out []SimProjection
	for _, p := range doc.Projection {
		r := p.Result
		if p.Shards <= 0 || r.Seconds <= 0 || r.Cores <= 0 || r.Input.Pods <= 0 {
			continue
		}
		out = append(out, SimProjection{Shards: p.Shards, D: p.D, K: max(p.K, 1), Batch: max(p.Batch, 1), Collectors: r.Input.Collectors,
			Costs: p.Costs, Nodes: nodes, Pods: r.Input.Pods, Seconds: r.Seconds, Cores: r.Cores})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("simulate JSON: no projection (run `meganode scheduler simulate --json FILE`, without --target-shards 0)")
	}
	return out, nil
}

// SchedulerSize is a shape scaled to a cluster.
type SchedulerSize struct {
	From    SimProjection `json:"from"`
	Shards  int           `json:"shards"`
	Cores   int           `json:"cores"`
	Seconds float64       `json:"seconds"` // with SimModelMargin
	Basis   string        `json:"basis"`
}

// scale sizes shape p for nodes, pods and a time target:
//   - shards hold the measured number of nodes each (p.Nodes / p.Shards), so the measured
//     per-pod cost applies: S = ⌈nodes / (p.Nodes/p.Shards)⌉;
//   - each shard evaluates pods·d/S pods, so seconds = p.Seconds × margin × (pods/p.Pods) × (p.Shards/S);
//   - above the target, more (smaller) shards at the same per-pod cost: S × seconds/target (smaller
//     shards cost less per pod, so this over-provisions rather than under);
//   - cores scale with shards: ⌈p.Cores × S / p.Shards⌉.
func (p SimProjection) scale(nodes, pods int, target float64) SchedulerSize {
	perShard := float64(p.Nodes) / float64(p.Shards)
	s := max(1, int(math.Ceil(float64(nodes)/perShard)))
	secs := func(s int) float64 {
		return p.Seconds * SimModelMargin * float64(pods) / float64(p.Pods) * float64(p.Shards) / float64(s)
	}
	if t := secs(s); t > target {
		s = int(math.Ceil(float64(s) * t / target))
	}
	return SchedulerSize{From: p, Shards: s, Seconds: secs(s), Cores: int(math.Ceil(float64(p.Cores) * float64(s) / float64(p.Shards)))}
}

// SizeScheduler picks the shape that places pods on nodes within target seconds on the fewest
// cores (then the fastest). It plans with batch 1 — every pod evaluated alone, as when no two
// pods share an equivalence class — and the shared costs when the projections have them (a
// shard's caches shared with others on a host, the pessimistic measurement).
func SizeScheduler(projs []SimProjection, nodes, pods int, target float64) (SchedulerSize, error) {
	shared := false
	for _, p := range projs {
		shared = shared || strings.HasPrefix(p.Costs, "shared")
	}
	var best SchedulerSize
	found := false
	for _, p := range projs {
		if p.Batch != 1 || shared && !strings.HasPrefix(p.Costs, "shared") {
			continue
		}
		z := p.scale(nodes, pods, target)
		if !found || z.Cores < best.Cores || z.Cores == best.Cores && z.Seconds < best.Seconds {
			best, found = z, true
		}
	}
	if !found {
		return SchedulerSize{}, fmt.Errorf("no projection with batch 1 (run simulate with --batch-list including 1)")
	}
	f := best.From
	costs := "costs measured under unrecorded conditions"
	if w := strings.Fields(f.Costs); len(w) > 0 {
		costs = "costs measured " + w[0]
	}
	best.Basis = fmt.Sprintf("shape S=%d d=%d K=%d batch 1 (%s) placed %d pods on %d nodes in %.1f s on %d cores; ×%.2f model margin, %d nodes per shard kept, scaled to %d pods",
		f.Shards, f.D, f.K, costs, f.Pods, f.Nodes, f.Seconds, f.Cores, SimModelMargin, int(math.Round(float64(f.Nodes)/float64(f.Shards))), pods)
	if pods == 0 {
		best.Basis += " (no pods given: shards sized to hold the nodes only; pass --pods)"
	}
	for _, p := range projs {
		if p.Batch > 1 && p.Shards == f.Shards && p.D == f.D && p.K == f.K && p.Costs == f.Costs {
			b := p.scale(nodes, pods, math.Inf(1))
			best.Basis += fmt.Sprintf("; pods of one class batched by %d: %.1f s on %d shards", p.Batch, b.Seconds, b.Shards)
			break
		}
	}
	return best, nil
}
