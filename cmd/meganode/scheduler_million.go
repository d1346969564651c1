package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/procfs"
	"github.com/meganode/meganode/internal/scheduler/model"
	"github.com/meganode/meganode/internal/scheduler/shard"
	"github.com/meganode/meganode/internal/scheduler/sim"
)

// `meganode scheduler million` (issue 37): the whole scheduler in one process — intakes,
// relays, collectors, S shards of the real framework — over an in-process apiserver holding N
// KWOK-like nodes and M pods created ahead, run to the last bind (sim.Simulate), measured: wall
// time, CPU by role, peak RSS, pods/s over time (a chart), placement; for a sample of pods, where
// kube-scheduler's own scoring over every node ranks the node each got (--rank-sample). Then the
// model's prediction of the same run, fed as `scheduler simulate` feeds it (costs measured here
// under the run's conditions after the run: predictInProcess). Before the run two small calibration
// runs estimate the peak RSS at the requested size; if it exceeds --max-rss the run is made at the
// largest size that fits, and what bounded it is printed.

type millionFlags struct {
	nodes, pods      int
	workload         string
	shards           int
	scatter          int
	batch            int
	collectors       int
	rankSample       int
	predict          bool
	predictOnly      bool
	heapProfile      string
	costPods         int
	costRounds       int
	maxRSS           string
	calibrate        int
	inflight         int
	timeout          time.Duration
	sampleEvery      time.Duration
	jsonOut, chartTo string
}

func newSchedulerMillionCmd() *cobra.Command {
	f := &millionFlags{}
	cmd := &cobra.Command{
		Use:   "million",
		Short: "place M pods on N in-process KWOK-like nodes with the whole meganode scheduler in one process, measured",
		Long: `million runs the whole meganode scheduler in this process — intake, relays, collectors and
--shards shards with the real kube-scheduler framework and default plugins — over an in-process
apiserver holding --nodes KWOK-like nodes and --pods pods created ahead (as 'create-pods' does),
until the last pod is bound, and reports wall time, CPU-seconds per role (from a CPU profile of the
run), peak RSS, pods/s over time (a chart) and placement: pods per node stdev, max, empty nodes,
and for a sample of pods (--rank-sample) the share placed where kube-scheduler's own scoring
(same plugins, one framework over every node) ranks the node in its top 5 %, beside the share its
own sampling rule achieves. --workload mixed adds pods of 1 and 4 CPU, nodes of 8 and 32 CPU, 5 %
of pods with topology spread or pod anti-affinity and 0.1 % with a node selector. After the run
the model (internal/scheduler/model) predicts the same run from costs measured here, as
'scheduler simulate' does, and the error is printed (uniform workload; mixed is not modelled).
If the estimated peak RSS (a calibration run at --calibrate nodes, scaled) exceeds --max-rss, the
size is reduced to the largest that fits, and what bounded it is printed. Ctrl-C stops it; nothing runs
outside this process.`,
		Example: `  meganode scheduler million --nodes 100000 --pods 100000 --json /tmp/m.json
  meganode scheduler million --nodes 1000000 --pods 1000000 --json docs/bench/million/uniform-1m.json
  meganode scheduler million --nodes 100000 --pods 100000 --workload mixed --rank-sample 200`,
		Args: noArgs,
		RunE: action(f, runSchedulerMillion),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 1_000_000, "KWOK-like nodes in the in-process apiserver")
	fs.IntVar(&f.pods, "pods", 1_000_000, "pods created ahead, all pending")
	fs.StringVar(&f.workload, "workload", sim.WorkloadUniform, "uniform (100m/64Mi pods of one ReplicaSet on 8 CPU nodes) or mixed")
	fs.IntVar(&f.shards, "shards", 16, "shards (S)")
	fs.IntVar(&f.scatter, "scatter", 2, "shards each pod is sent to (d; pods with constraints go to every shard)")
	fs.IntVar(&f.batch, "batch", 32, "pods of one class planned together (1: off)")
	fs.IntVar(&f.collectors, "collectors", 1, "collectors (each with its intake)")
	fs.IntVar(&f.inflight, "inflight", 0, "attempts (a batch is one) between send and decision per collector (0: the scheduler's default, 8 × shards × d). "+
		"Their queued work must stay well inside the collector's 30 s answer timeout: at 1M nodes on 2 cores 256 batches are ≈ 60 s of it")
	fs.IntVar(&f.rankSample, "rank-sample", -1, "pods whose placement is ranked by kube-scheduler's scoring over every node after the run (-1: 200 for mixed, 0 for uniform)")
	fs.BoolVar(&f.predict, "predict", true, "after the run, measure the costs here and print the model's prediction of the run (uniform)")
	fs.BoolVar(&f.predictOnly, "predict-only", false, "no run: only the model's prediction of a run of this size on this machine (costs measured here)")
	fs.StringVar(&f.heapProfile, "heapprofile", "", "write the heap profile of the run's live objects when the last pod is bound here (what its memory is made of)")
	fs.IntVar(&f.costPods, "cost-pods", 500, "pods per shard-cost measurement round (--predict)")
	fs.IntVar(&f.costRounds, "cost-rounds", 3, "shard-cost measurement rounds, median used (--predict)")
	fs.StringVar(&f.maxRSS, "max-rss", "auto", "largest peak RSS a run may reach, in GiB (auto: 90 % of MemAvailable; 0: no check)")
	fs.IntVar(&f.calibrate, "calibrate", 20000, "nodes (and as many pods) of the calibration run that estimates the peak RSS (0: none)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Hour, "give up when the last pod is not bound by then (what bounded the run: time)")
	fs.DurationVar(&f.sampleEvery, "sample-every", time.Second, "pods/s and RSS timeline resolution")
	fs.StringVar(&f.jsonOut, "json", "", "write the report as JSON here")
	fs.StringVar(&f.chartTo, "chart", "", "write the pods/s chart (PNG) here (default: the --json path with .png)")
	completeValues(cmd, "workload", sim.WorkloadUniform, sim.WorkloadMixed)
	return cmd
}

func (f *millionFlags) validate() error {
	if err := oneOf("workload", f.workload, sim.WorkloadUniform, sim.WorkloadMixed); err != nil {
		return err
	}
	switch {
	case f.nodes < 1:
		return usagef("--nodes: want at least 1, got %d", f.nodes)
	case f.pods < 1:
		return usagef("--pods: want at least 1, got %d", f.pods)
	case f.pods > 110*f.nodes:
		return usagef("--pods: %d pods do not fit on %d nodes of 110 pods each", f.pods, f.nodes)
	case f.shards < 1:
		return usagef("--shards: want at least 1, got %d", f.shards)
	case f.scatter < 1:
		return usagef("--scatter: want at least 1, got %d", f.scatter)
	case f.batch < 1:
		return usagef("--batch: want at least 1 (1: off), got %d", f.batch)
	case f.collectors < 1:
		return usagef("--collectors: want at least 1, got %d", f.collectors)
	case f.inflight < 0:
		return usagef("--inflight: want 0 (default) or a count, got %d", f.inflight)
	case f.rankSample < -1:
		return usagef("--rank-sample: want -1 (auto), 0 or a count, got %d", f.rankSample)
	case f.costPods < 1 || f.costRounds < 1:
		return usagef("--cost-pods and --cost-rounds: want at least 1")
	case f.calibrate < 0:
		return usagef("--calibrate: want 0 or a node count, got %d", f.calibrate)
	case f.timeout <= 0 || f.sampleEvery <= 0:
		return usagef("--timeout and --sample-every: want a positive duration")
	}
	_, err := f.rssLimit()
	return err
}

// goMemorySettings sets the Go runtime's soft memory limit to the run's RSS limit (--max-rss)
// unless GOMEMLIMIT is set, and returns GOGC and the limit in force (a limit of math.MaxInt64
// is none). The limit changes when the collector runs, never what the scheduler does: near it
// the heap is collected more often (more GC CPU, charged to the gc role) instead of growing
// into the headroom GOGC would give it.
func goMemorySettings(limit uint64) (gcPercent int, memLimit int64) {
	if os.Getenv("GOMEMLIMIT") == "" && limit > 0 {
		debug.SetMemoryLimit(int64(limit))
	}
	gcPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	return gcPercent, debug.SetMemoryLimit(-1)
}

// goMemoryText is the GC settings as printed.
func goMemoryText(gcPercent int, memLimit int64) string {
	l := "none"
	if memLimit > 0 && memLimit < 1<<62 {
		l = gib(uint64(memLimit))
	}
	return fmt.Sprintf("Go GC: GOGC %d, soft memory limit %s (GOMEMLIMIT, from --max-rss unless set)", gcPercent, l)
}

// rssLimit is --max-rss in bytes (0: no check).
func (f *millionFlags) rssLimit() (uint64, error) {
	if f.maxRSS == "auto" {
		avail := memAvailable()
		if avail == 0 {
			return 0, nil
		}
		return avail / 10 * 9, nil
	}
	var gib float64
	if _, err := fmt.Sscanf(f.maxRSS, "%g", &gib); err != nil || gib < 0 || strings.TrimSpace(f.maxRSS) != f.maxRSS {
		return 0, usagef("--max-rss: want auto or GiB (0: no check), got %q", f.maxRSS)
	}
	return uint64(gib * (1 << 30)), nil
}

// memAvailable is MemAvailable of /proc/meminfo in bytes (0: unknown).
func memAvailable() uint64 {
	m, err := procfs.MemInfo()
	if err != nil {
		return 0
	}
	return m["MemAvailable"]
}

// millionReport is the JSON report. Figures not measured are null (and printed as missing).
type millionReport struct {
	Command        []string    `json:"command"`
	Workload       string      `json:"workload"`
	RequestedNodes int         `json:"requested_nodes"`
	RequestedPods  int         `json:"requested_pods"`
	Fit            *millionFit `json:"fit"`
	// The Go runtime's garbage collector settings of the run: GOGC (percent; the environment's
	// or 100) and the soft memory limit (GOMEMLIMIT: the environment's, else --max-rss), under
	// which the collector runs more often instead of letting the heap grow past it.
	GoGCPercent     int                `json:"go_gc_percent"`
	GoMemLimitBytes int64              `json:"go_memory_limit_bytes"`
	Nodes           int                `json:"nodes"`
	Pods            int                `json:"pods"`
	Bound           int                `json:"bound"`
	WallSeconds     float64            `json:"wall_seconds"`
	SetupSeconds    float64            `json:"setup_seconds"`
	PodsPerSec      float64            `json:"pods_per_sec"`
	CPUSeconds      map[string]float64 `json:"cpu_seconds"` // per role and "total"
	CPUProfiled     float64            `json:"cpu_profiled_seconds"`
	PeakRSSBytes    uint64             `json:"peak_rss_bytes"`
	Cores           int                `json:"cores"`
	// Placement.
	StddevPerNode float64 `json:"stddev_pods_per_node"`
	MaxPerNode    int     `json:"max_pods_per_node"`
	EmptyNodes    int     `json:"empty_nodes"`
	Overcommitted int     `json:"overcommitted_nodes"`
	SpreadMaxSkew *int    `json:"spread_max_skew"`
	// Top5Share: share of the sampled pods placed in kube-scheduler's top 5 % (null: not ranked).
	Top5Share     *float64         `json:"top5_share"`
	KubeTop5Share *float64         `json:"kube_top5_share"`
	Rank          *sim.RankSummary `json:"rank"`
	// Model: the prediction of this run (null: not predicted, with ModelMissing saying why).
	Model        *millionModel `json:"model"`
	ModelMissing string        `json:"model_missing,omitempty"`
	Timeline     []sim.Sample  `json:"timeline"`
	Config       sim.Config    `json:"config"`
	Sim          *sim.Result   `json:"sim"`
	Error        string        `json:"error,omitempty"`
	Chart        string        `json:"chart,omitempty"`
}

// millionFit says which size ran and why.
type millionFit struct {
	LimitBytes     uint64  `json:"limit_bytes"` // 0: not checked
	CalibrateNodes int     `json:"calibrate_nodes"`
	CalibratePeak  uint64  `json:"calibrate_peak_rss_bytes"`
	BaseRSS        uint64  `json:"base_rss_bytes"`
	BytesPerObject float64 `json:"bytes_per_node_and_pod"` // slope of the peak RSS between the two calibration runs
	EstimatedBytes uint64  `json:"estimated_peak_rss_bytes"`
	BoundedBy      string  `json:"bounded_by"` // "" (the requested size ran), "memory" or "time"
	Note           string  `json:"note,omitempty"`
}

type millionModel struct {
	Predicted  model.Result    `json:"predicted"`
	Seconds    float64         `json:"predicted_seconds"`
	ErrorPct   float64         `json:"error_pct"`
	Costs      *shardCosts     `json:"costs"`
	IntakeCost *sim.IntakeCost `json:"intake_cost"`
	Hops       sim.HopCosts    `json:"hops"`
	FakeAPI    sim.FakeAPICost `json:"fake_api"`
	Run        inProcessRun    `json:"run"`
}

func (f *millionFlags) simConfig(nodes, pods, rank int, prog *bench.Progress) sim.Config {
	return sim.Config{Nodes: nodes, Pods: pods, Shards: f.shards, Fanout: 10, Parallelism: 1, EquivalenceTTL: 2 * time.Second,
		FeasibleToFind: shard.FeasibleAuto, Scatter: f.scatter, Batch: batchFlag(f.batch), ParallelPods: 1, Collectors: f.collectors,
		Precreate: true, GlobalView: globalViewFor(f.workload), CountedBinds: true, InFlight: f.inflight, Timeout: f.timeout, Workload: f.workload,
		Sample: f.sampleEvery, RoleCPU: true, RankSample: rank, Progress: prog, HeapProfile: f.heapProfile}
}

// Bindings are counted, not written (as `simulate`'s runs, which the model is validated on: the
// fake apiserver's watch fan-out would be most of the CPU). For the mixed workload this has a
// cost: the shards' global views learn other shards' placements only from the collector's
// ghosts (the last 2 s, at most 32, expired after 30 s), never from the pod informers, so a
// spread group placed over a longer time can break maxSkew (zone skew 3 at 20K nodes,
// docs/bench/million). Writing them is not an option at these rates: client-go's fake watcher
// panics when 100 events queue up ("channel full", seen at 20K mixed).
//
// globalViewFor: uniform pods need no global view (it holds every node in every shard); the
// mixed workload's constrained pods do.
func globalViewFor(workload string) string {
	if workload == sim.WorkloadMixed {
		return "auto"
	}
	return "off"
}

func runSchedulerMillion(ctx context.Context, cmd *cobra.Command, f *millionFlags) error {
	w := cmd.OutOrStdout()
	prog := bench.NewProgress(os.Stderr)
	limit, err := f.rssLimit()
	if err != nil {
		return err
	}
	rank := f.rankSample
	if rank < 0 {
		rank = 0
		if f.workload == sim.WorkloadMixed {
			rank = 200
		}
	}
	rep := &millionReport{Command: os.Args, Workload: f.workload, RequestedNodes: f.nodes, RequestedPods: f.pods, Cores: runtime.NumCPU()}
	rep.GoGCPercent, rep.GoMemLimitBytes = goMemorySettings(limit)
	nodes, pods := f.nodes, f.pods
	if f.predictOnly {
		if f.workload == sim.WorkloadMixed {
			return usagef("--predict-only: the model has no mixed workload")
		}
		m, err := predictMillion(ctx, w, f, nodes, pods)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  model: a run of %d pods on %d nodes here would take %.1f s, %.0f core-seconds in the model's CPU pool (%s)\n",
			pods, nodes, m.Seconds, busySeconds(m.Predicted), busyText(m.Predicted))
		if f.jsonOut == "" {
			return nil
		}
		// Only what was computed: no run, so no run figures (not zeros).
		b, err := json.MarshalIndent(map[string]any{"command": os.Args, "workload": f.workload, "nodes": nodes, "pods": pods,
			"cores": runtime.NumCPU(), "predict_only": true, "model": m}, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(f.jsonOut, b, 0o644)
	}

	// 1. Does it fit? A calibration run at a small size, scaled linearly in nodes + pods.
	fit := &millionFit{LimitBytes: limit, CalibrateNodes: min(f.calibrate, nodes)}
	rep.Fit = fit
	if limit > 0 && f.calibrate > 0 && nodes > f.calibrate {
		// Two calibration runs, a quarter and the whole --calibrate size: the slope between
		// their peaks is the bytes per node and pod (fixed costs — 16 frameworks, the runtime —
		// cancel out); the larger run's peak anchors the line.
		c := f.calibrate
		cp := max(1, int(int64(c)*int64(pods)/int64(nodes)))
		fmt.Fprintf(w, "== calibration: %d and %d nodes with as many pods per node (%s), to estimate the peak RSS at %d nodes, %d pods\n",
			c/4, c, f.workload, nodes, pods)
		runtime.GC()
		base, _ := memNow()
		var peaks [2]uint64
		for k, n := range []int{c / 4, c} {
			cfg := f.simConfig(n, max(1, cp*n/c), 0, prog)
			cfg.RoleCPU = false
			r, err := sim.Simulate(ctx, cfg)
			if err != nil {
				return fmt.Errorf("calibration: %w", err)
			}
			peaks[k] = r.PeakRSSBytes
		}
		objs := float64(c + cp - (c/4 + max(1, cp*(c/4)/c)))
		fit.BaseRSS, fit.CalibratePeak = base, peaks[1]
		fit.BytesPerObject = float64(peaks[1]-min(peaks[0], peaks[1])) / objs
		estimate := func(n, p int) uint64 { return peaks[1] + uint64(fit.BytesPerObject*float64(max(n+p-c-cp, 0))) }
		fit.EstimatedBytes = estimate(nodes, pods)
		fmt.Fprintf(w, "  calibration peak RSS %s at %d nodes, %s at %d (process before %s): %.0f bytes per node and pod; %d nodes + %d pods → %s estimated, limit %s\n",
			gib(peaks[0]), c/4, gib(peaks[1]), c, gib(base), fit.BytesPerObject, nodes, pods, gib(fit.EstimatedBytes), gib(limit))
		if fit.EstimatedBytes > limit && fit.BytesPerObject > 0 {
			// The largest size with the requested pods per node whose estimate is within the
			// limit, rounded down to a thousand nodes.
			fit.BoundedBy = "memory"
			objs := float64(c+cp) + float64(limit-min(limit, peaks[1]))/fit.BytesPerObject
			ratio := float64(pods) / float64(nodes)
			nodes = max(int(objs/(1+ratio))/1000*1000, min(c, nodes))
			pods = max(1, int(float64(nodes)*ratio))
			fit.EstimatedBytes = estimate(nodes, pods)
			fit.Note = fmt.Sprintf("%d nodes + %d pods do not fit: estimated peak RSS %s > limit %s; the largest size that fits is %d nodes, %d pods (estimated %s)",
				f.nodes, f.pods, gib(estimate(f.nodes, f.pods)), gib(limit), nodes, pods, gib(fit.EstimatedBytes))
			fmt.Fprintf(w, "  %s\n", fit.Note)
		}
	}
	rep.Nodes, rep.Pods = nodes, pods

	// 2. The run.
	cfg := f.simConfig(nodes, pods, rank, prog)
	rep.Config = cfg
	fmt.Fprintf(w, "== run: %d nodes, %d pods (%s, created ahead), %d shards, d=%d, batch %d, %d collector(s), fanout 10, %d cores\n",
		nodes, pods, f.workload, f.shards, f.scatter, f.batch, f.collectors, runtime.NumCPU())
	fmt.Fprintf(w, "  %s\n", goMemoryText(rep.GoGCPercent, rep.GoMemLimitBytes))
	r, err := sim.Simulate(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		rep.Error = err.Error()
		if strings.Contains(err.Error(), "bound after") {
			fit.BoundedBy = "time"
			fit.Note = fmt.Sprintf("not every pod was bound within --timeout %s: %v", f.timeout, err)
		}
		_ = writeMillion(w, f, rep)
		return err
	}
	rep.Sim = r
	rep.Bound, rep.WallSeconds, rep.SetupSeconds, rep.PodsPerSec = r.Bound, r.Seconds, r.SetupSeconds, r.PodsPerSec
	rep.CPUSeconds = map[string]float64{"total": r.CPUSeconds}
	for k, v := range r.RoleCPU {
		rep.CPUSeconds[k] = v
	}
	rep.CPUProfiled = r.RoleCPUSampled
	rep.PeakRSSBytes = r.PeakRSSBytes
	rep.StddevPerNode, rep.MaxPerNode, rep.EmptyNodes, rep.Overcommitted = r.StddevPerNode, r.MaxPerNode, r.EmptyNodes, r.Overcommitted
	if f.workload == sim.WorkloadMixed {
		rep.SpreadMaxSkew = &r.SpreadMaxSkew
	}
	if r.Rank != nil && r.Rank.Sample > 0 {
		rep.Rank = r.Rank
		rep.Top5Share, rep.KubeTop5Share = &r.Rank.TopShare, &r.Rank.KubeTopShare
	}
	rep.Timeline = r.Timeline
	printMillion(w, rep)

	// 3. The model's prediction of this run.
	switch {
	case !f.predict:
		rep.ModelMissing = "not asked (--predict=false)"
	case f.workload == sim.WorkloadMixed:
		rep.ModelMissing = "the model has no constrained pods (global view: every node, serialised groups) nor pod classes of several sizes"
	default:
		m, err := predictMillion(ctx, w, f, nodes, pods)
		if err != nil {
			return err
		}
		m.ErrorPct = 100 * (m.Seconds - r.Seconds) / r.Seconds
		rep.Model = m
	}
	if rep.Model != nil {
		fmt.Fprintf(w, "  model: predicted %.1f s for the run (measured %.1f s): error %+.1f %%\n", rep.Model.Seconds, r.Seconds, rep.Model.ErrorPct)
	} else {
		fmt.Fprintf(w, "  model: missing (%s)\n", rep.ModelMissing)
	}
	return writeMillion(w, f, rep)
}

// predictMillion measures the run's costs (shards of the run's size, the run's shard count on
// these cores: `simulate`'s shared condition), the intake, the hops and the fake apiserver, and
// runs the model on them (predictInProcess, as `simulate` validates its runs).
func predictMillion(ctx context.Context, w io.Writer, f *millionFlags, nodes, pods int) (*millionModel, error) {
	fmt.Fprintf(w, "== the model's prediction of this run: costs measured here (shards of %d nodes, %d of them on %d cores)\n",
		nodes/f.shards, f.shards, runtime.NumCPU())
	sc, err := measureShardCosts(ctx, nodes/max(f.shards, 1), f.shards, f.scatter, f.costPods, max(f.batch, 1),
		shard.MeasureOpts{Shards: f.shards, Workers: f.shards, Rounds: f.costRounds})
	if err != nil {
		return nil, err
	}
	ic, err := sim.MeasureIntake(ctx, 20000, f.shards, f.scatter, f.batch)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "  intake: %.1f µs CPU per pod\n", ic.CPUUsPerPod)
	hops, err := sim.MeasureHops(ctx)
	if err != nil {
		return nil, err
	}
	api, err := sim.MeasureFakeAPI(ctx, nodes, min(pods, 20000), true)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "  fake apiserver (counted binds): %.0f µs CPU per pod\n", api.CPUUsPerPod)
	run := inProcessRun{Pods: pods, Shards: f.shards, Collectors: f.collectors, D: f.scatter, Batch: f.batch}
	p := predictInProcess(run, ic.CPUUsPerPod, hops, api, sc)
	return &millionModel{Predicted: p, Seconds: p.Seconds, Costs: sc, IntakeCost: ic, Hops: hops, FakeAPI: api, Run: run}, nil
}

func printMillion(w io.Writer, rep *millionReport) {
	fmt.Fprintf(w, "  %d of %d pods bound on %d nodes in %.1f s (%.0f pods/s; setup %.1f s before the clock)\n",
		rep.Bound, rep.Pods, rep.Nodes, rep.WallSeconds, rep.PodsPerSec, rep.SetupSeconds)
	var roles []string
	for k := range rep.CPUSeconds {
		if k != "total" {
			roles = append(roles, k)
		}
	}
	sort.Slice(roles, func(i, j int) bool { return rep.CPUSeconds[roles[i]] > rep.CPUSeconds[roles[j]] })
	var parts []string
	for _, k := range roles {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, rep.CPUSeconds[k]))
	}
	fmt.Fprintf(w, "  CPU %.1f core-seconds (%.0f µs per pod): %s (profile sampled %.1f s)\n", rep.CPUSeconds["total"],
		rep.CPUSeconds["total"]/float64(max(rep.Bound, 1))*1e6, strings.Join(parts, ", "), rep.CPUProfiled)
	fmt.Fprintf(w, "  peak RSS %s\n", gib(rep.PeakRSSBytes))
	fmt.Fprintf(w, "  placement: pods per node stdev %.3f, max %d, empty nodes %d, over-committed nodes %d", rep.StddevPerNode, rep.MaxPerNode,
		rep.EmptyNodes, rep.Overcommitted)
	if rep.SpreadMaxSkew != nil {
		fmt.Fprintf(w, ", largest zone skew of a spread group %d (maxSkew 1)", *rep.SpreadMaxSkew)
	}
	fmt.Fprintln(w)
	if rep.Rank != nil {
		fmt.Fprintf(w, "  kube-scheduler's top 5 %%: %.1f %% of %d sampled pods (constrained: %.1f %% of %d); its own sampling rule's pick: %.1f %%; mean share of feasible nodes scored above the placement %.2f %%; not feasible on replay %d (%.0f s)\n",
			100*rep.Rank.TopShare, rep.Rank.Sample, 100*rep.Rank.ConstrainedTopShare, rep.Rank.Constrained, 100*rep.Rank.KubeTopShare,
			100*rep.Rank.MeanHigherFraction, rep.Rank.NotFeasible, rep.Rank.Seconds)
	} else {
		fmt.Fprintf(w, "  kube-scheduler's top 5 %%: missing (--rank-sample 0)\n")
	}
}

// writeMillion writes the JSON and the chart.
func writeMillion(w io.Writer, f *millionFlags, rep *millionReport) error {
	chartTo := f.chartTo
	if chartTo == "" && f.jsonOut != "" {
		chartTo = strings.TrimSuffix(f.jsonOut, ".json") + ".png"
	}
	if chartTo != "" && len(rep.Timeline) > 0 {
		png, err := millionChart(rep).PNG()
		if err != nil {
			return err
		}
		if err := os.WriteFile(chartTo, png, 0o644); err != nil {
			return err
		}
		rep.Chart = chartTo
		fmt.Fprintf(w, "  chart: %s\n", chartTo)
	}
	if f.jsonOut == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  json: %s\n", f.jsonOut)
	return os.WriteFile(f.jsonOut, b, 0o644)
}

// millionChart is pods/s over the run in at most 20 intervals (bench.Chart, gonum/plot, as the
// bench report's charts).
func millionChart(rep *millionReport) *bench.Chart {
	tl := rep.Timeline
	const buckets = 20
	end := tl[len(tl)-1].Seconds
	step := end / buckets
	c := &bench.Chart{Title: fmt.Sprintf("meganode scheduler million: %d pods on %d nodes (%s), %d cores", rep.Pods, rep.Nodes, rep.Workload, rep.Cores),
		XLabel: "seconds since the clock started (interval end)", YLabel: "pods bound per second"}
	s := bench.Series{Name: "pods/s", Color: color.RGBA{0x1f, 0x6f, 0xc5, 0xff}}
	var prevT float64
	var prevB int64
	k := 0
	for b := 1; b <= buckets; b++ {
		t := step * float64(b)
		for k < len(tl)-1 && tl[k].Seconds < t {
			k++
		}
		cur := tl[k]
		if cur.Seconds <= prevT {
			continue
		}
		c.X = append(c.X, fmt.Sprintf("%.0f", cur.Seconds))
		s.Values = append(s.Values, float64(cur.Bound-prevB)/(cur.Seconds-prevT))
		prevT, prevB = cur.Seconds, cur.Bound
	}
	c.Series = []bench.Series{s}
	return c
}

// busySeconds is the model's CPU-seconds: its shared pool's when it has one (every stage runs
// on it), else the sum over the stages.
func busySeconds(r model.Result) float64 {
	var t float64
	for _, st := range r.Stages {
		if st.Name == "cpu pool" {
			return st.BusySeconds
		}
		t += st.BusySeconds
	}
	return t
}

func gib(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// memNow is this process's resident set in bytes (VmRSS).
func memNow() (uint64, error) {
	s, err := procfs.Status(0)
	if err != nil {
		return 0, err
	}
	if s["VmRSS"] == 0 {
		return 0, fmt.Errorf("no VmRSS in /proc/self/status")
	}
	return s["VmRSS"], nil
}
