package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/model"
	"github.com/meganode/meganode/internal/scheduler/shard"
	"github.com/meganode/meganode/internal/scheduler/sim"
)

// `meganode scheduler simulate`: the measured projection.
//
//  1. Costs, measured here: shards of the target size (1M/S nodes, the real framework and
//     default plugins) per pod evaluated alone and per pod of a batch, under two conditions —
//     one shard on one core ("alone": a dedicated core keeps the shard's nodes in its caches)
//     and --cost-interleave shards, each evaluating on its own goroutine, on all of this
//     machine's cores ("shared": caches and counters shared as when many shards share a host,
//     scheduled by the Go runtime as a run's shards are); the hops; the
//     in-process fake apiserver's cost per pod. The in-process runs' costs are measured
//     shared, with the runs' own shard count on the runs' cores: the conditions of the run.
//  2. Runs, in process on this machine: N nodes, N pods, S shards, for each --scatter and
//     --batch value, with placement quality; plus kube-scheduler's algorithm (one shard, every
//     pod alone, kube-scheduler's sampling rule) as the quality reference.
//  3. The model (internal/scheduler/model, a discrete-event simulation) fed with the costs
//     measured at the run's shard size, on the same 2-core pool, predicts each run it was not
//     fitted to: the error is printed (also with the "alone" costs, to show what the sharing costs).
//  4. The same model, fed with the costs at the target shard size and dedicated cores, projects
//     1M pods on 1M nodes for each S, d, K and batch size, with the cores it uses, once per
//     cost condition.
//
// shardCosts are one shard size's measured costs.
type shardCosts struct {
	Nodes  int              `json:"nodes"`
	Shared bool             `json:"shared"`
	Single *shard.Cost      `json:"single"`
	Batch  *shard.BatchCost `json:"batch"`
}

// commitCost is the winning shard's CPU per pod committed: a single pod's commit, or a batch
// slot's (placeholder swapped for the pod, then the commit).
func commitCost(sc *shardCosts, batch int) float64 {
	if batch > 1 {
		return sc.Batch.CommitCPUUs
	}
	return sc.Single.CommitCPUUs
}

// simFlags are `scheduler simulate`'s flags.
type simFlags struct {
	nodes       int
	pods        int
	shards      int
	scatters    string
	batches     string
	refNodes    int
	stagePods   int
	rounds      int
	interleave  int
	tNodes      int
	tPods       int
	tShards     string
	tD          string
	tK          string
	tCollectors int
	bindRate    float64
	hopLat      float64
	binds       string
	skipRuns    bool
	jsonOut     string
	cpuProfile  string
}

func newSchedulerSimulateCmd() *cobra.Command {
	f := &simFlags{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "measure the meganode scheduler's per-pod costs here and project 1M pods on 1M nodes",
		Long: `simulate measures what one pod costs a shard of the target size (the real framework and
default plugins, alone on a core and sharing the cores), the hops and the intake; runs the
scheduler in process on --nodes fake nodes for each --scatter-list and --batch-list value
(with kube-scheduler's algorithm at --reference-nodes for placement quality); checks the
model (internal/scheduler/model) against those runs; and projects --target-pods pods on
--target-nodes nodes for each --target-shards, --target-scatter and --target-parallel-pods
value. --json writes everything (read by 'meganode doctor plan --simulate-json').`,
		Example: `  meganode scheduler simulate --nodes 1000 --pods 2000 --shards 4 --stage-pods 1000
  meganode scheduler simulate --skip-runs --target-shards 256,1024 --json /tmp/sim.json
  meganode scheduler simulate --nodes 100000 --pods 100000 --shards 16 --json docs/bench/scheduler-sim/run-100k.json`,
		Args: noArgs,
		RunE: action(f, runSchedulerSimulate),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 100000, "in-process runs: fake nodes (8 CPU, 32 GiB, as `up`'s KWOK nodes)")
	fs.IntVar(&f.pods, "pods", 100000, "in-process runs: pods (100m, 64Mi, one ReplicaSet)")
	fs.IntVar(&f.shards, "shards", 16, "in-process runs: shards")
	fs.StringVar(&f.scatters, "scatter-list", "2,4", "in-process runs: --scatter values")
	fs.StringVar(&f.batches, "batch-list", "1,32", "in-process runs: --batch values (1: off)")
	fs.IntVar(&f.refNodes, "reference-nodes", 20000, "kube-scheduler's algorithm (1 shard, scatter all, no batch, one pod at a time) on this many nodes and pods, and meganode's first mode at the same size, for placement quality (0: skip)")
	fs.IntVar(&f.stagePods, "stage-pods", 1000, "pods timed per shard-cost measurement round")
	fs.IntVar(&f.rounds, "cost-rounds", 3, "rounds per shard-cost measurement (the median round is used)")
	fs.IntVar(&f.interleave, "cost-interleave", 16, "projection: also measure the target-size costs with this many shards, each on its own goroutine, sharing this machine's cores (shards sharing a host's caches; 0: alone only)")
	fs.IntVar(&f.tNodes, "target-nodes", 1_000_000, "projection: nodes")
	fs.IntVar(&f.tPods, "target-pods", 1_000_000, "projection: pods")
	fs.StringVar(&f.tShards, "target-shards", "256,1024", "projection: shard counts")
	fs.StringVar(&f.tD, "target-scatter", "2", "projection: d values")
	fs.StringVar(&f.tK, "target-parallel-pods", "1,4", "projection: pods evaluated at once per shard (cores per shard)")
	fs.IntVar(&f.tCollectors, "target-collectors", 16, "projection: collectors")
	fs.Float64Var(&f.bindRate, "bind-rate", 0, "projection: apiserver Binding throughput in pods/s (0: not a limit; the seed's 5 apiservers are outside the scheduler's cores)")
	fs.Float64Var(&f.hopLat, "hop-latency-us", 100, "projection: network delay per message")
	fs.StringVar(&f.binds, "binds", "counted", "in-process runs: counted (Bindings recorded, no object write or watch event: the scheduler's own cost) or api (the fake apiserver writes each pod and every informer receives it: ≈2.7 ms CPU per pod, the runs' bottleneck past a few shards)")
	fs.BoolVar(&f.skipRuns, "skip-runs", false, "costs and projection only (no in-process runs, no validation)")
	fs.StringVar(&f.jsonOut, "json", "", "write every measurement, run, prediction and projection as JSON here")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "in-process runs: write CPU profiles with this prefix, one per run and one per run's shared cost measurement (<prefix>-run-d2-b32.pprof, <prefix>-costs-d2-b32.pprof), so the run's CPU can be compared with what its measurement saw")
	completeValues(cmd, "binds", "counted", "api")
	return cmd
}

func (f *simFlags) validate() error {
	if err := oneOf("binds", f.binds, "counted", "api"); err != nil {
		return err
	}
	_, err := f.lists()
	return err
}

// lists parses the comma-list flags: scatter, batch, target shards, target scatter, target parallel pods.
func (f *simFlags) lists() ([5][]int, error) {
	var out [5][]int
	for i, l := range []struct {
		flag string
		v    string
	}{{"scatter-list", f.scatters}, {"batch-list", f.batches}, {"target-shards", f.tShards},
		{"target-scatter", f.tD}, {"target-parallel-pods", f.tK}} {
		var err error
		if out[i], err = parseInts(l.v); err != nil {
			return out, usagef("--%s: %v", l.flag, err)
		}
	}
	return out, nil
}

func runSchedulerSimulate(ctx context.Context, _ *cobra.Command, f *simFlags) error {
	lists, err := f.lists()
	if err != nil {
		return err
	}
	dList, bList, sList, tdList, kList := lists[0], lists[1], lists[2], lists[3], lists[4]
	counted := f.binds == "counted"
	maxBatch := 1
	for _, b := range bList {
		maxBatch = max(maxBatch, b)
	}
	out := map[string]any{"command": os.Args, "cores_here": runtime.NumCPU()}

	// 1. Costs.
	// A shard's feasible-node target depends on S and d (scheduler.FeasibleLimitSampled): the d
	// shards of a pod together examine what kube-scheduler examines over the whole cluster.
	measure := func(n, shardsN, d int, o shard.MeasureOpts) (*shardCosts, error) {
		return measureShardCosts(ctx, n, shardsN, d, f.stagePods, maxBatch, o)
	}
	fmt.Printf("== costs measured here (real framework and default plugins, kube-scheduler's sampling rule per shard)\n")
	costs := map[string]*shardCosts{}
	type need struct {
		nodes, shards, d int
		o                shard.MeasureOpts
	}
	costKey := func(k need) string {
		return fmt.Sprintf("%d nodes/S=%d/d=%d/%s", k.nodes, k.shards, k.d, conditionText(k.o))
	}
	alone := shard.MeasureOpts{Shards: 1, Workers: 1, Rounds: f.rounds}
	runShared := shard.MeasureOpts{Shards: f.shards, Workers: f.shards, Rounds: f.rounds}
	targetShared := shard.MeasureOpts{Shards: f.interleave, Workers: f.interleave, Rounds: f.rounds}
	var needs []need // the runs' own costs are measured just before each run (below)
	conditions := []shard.MeasureOpts{alone}
	if f.interleave > 1 {
		conditions = append(conditions, targetShared)
	}
	for _, s := range sList {
		for _, d := range tdList {
			for _, o := range conditions {
				needs = append(needs, need{f.tNodes / s, s, d, o})
			}
		}
	}
	for _, k := range needs {
		if costs[costKey(k)] != nil {
			continue
		}
		c, err := measure(k.nodes, k.shards, k.d, k.o)
		if err != nil {
			return err
		}
		costs[costKey(k)] = c
	}
	out["shard_costs"] = costs
	// The collector's own CPU per pod (watch, bookkeeping, pod and frame encoding, pick,
	// registration), per mode: the model's EncodeUs.
	intakeCosts := map[string]*sim.IntakeCost{}
	intakeCost := func(s, d, b int) (float64, error) {
		k := fmt.Sprintf("S=%d/d=%d/batch=%d", s, d, b)
		if c := intakeCosts[k]; c != nil {
			return c.CPUUsPerPod, nil
		}
		c, err := sim.MeasureIntake(ctx, 20000, s, d, b)
		if err != nil {
			return 0, err
		}
		intakeCosts[k] = c
		fmt.Printf("  intake, S=%d d=%d batch=%d: %.1f µs CPU per pod (%d frames for %d pods)\n", s, d, b, c.CPUUsPerPod, c.Frames, c.Pods)
		return c.CPUUsPerPod, nil
	}
	out["intake_costs"] = intakeCosts
	hops, err := sim.MeasureHops(ctx)
	if err != nil {
		return err
	}
	out["hops"] = hops
	fmt.Printf("  hops: encode %.2f µs/pod (%d B), relay→child in-process %.2f µs, gRPC frame %.2f µs, streamed proposal %.2f µs, collector per proposal %.2f µs\n",
		hops.EncodeUs, hops.FrameBytes, hops.RelayChildUs, hops.GRPCFrameUs, hops.GRPCStreamPropUs, hops.CollectorUs)

	type runRow struct {
		Label     string        `json:"label"`
		Sim       *sim.Result   `json:"sim"`
		Costs     []*shardCosts `json:"costs,omitempty"`     // shared, alone: measured just before the run
		Predicted *model.Result `json:"predicted,omitempty"` // with the costs measured shared, as in the run
		ErrorPct  float64       `json:"error_pct,omitempty"`
		// With the costs of one shard alone on one core: what the sharing adds.
		PredictedAlone *model.Result `json:"predicted_alone,omitempty"`
		ErrorAlonePct  float64       `json:"error_alone_pct,omitempty"`
		PodsPerCPU     float64       `json:"pods_per_cpu_second"`
	}
	var rows []runRow
	if !f.skipRuns {
		api, err := sim.MeasureFakeAPI(ctx, f.nodes, min(f.pods, 20000), counted)
		if err != nil {
			return err
		}
		out["fake_api"] = api
		fmt.Printf("  in-process fake apiserver (--binds %s): %.0f µs CPU per pod, %.0f µs wall with 16 binders: it uses %.2f cores\n",
			f.binds, api.CPUUsPerPod, api.WallUsPerPod, api.Concurrency)
		// profile starts a CPU profile of one phase (nothing without --cpuprofile); the returned
		// func stops it. One file per phase: the run and its cost measurement are in one process,
		// and only separate profiles tell which of them spent what.
		profile := func(phase string, d, b int) (func(), error) {
			if f.cpuProfile == "" {
				return func() {}, nil
			}
			f, err := os.Create(fmt.Sprintf("%s-%s-d%d-b%d.pprof", f.cpuProfile, phase, d, b))
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return nil, err
			}
			return func() { pprof.StopCPUProfile(); f.Close() }, nil
		}
		fmt.Printf("== in-process runs: %d nodes, %d pods (pre-created), %d shards, %d cores shared by everything\n", f.nodes, f.pods, f.shards, runtime.NumCPU())
		for _, d := range dList {
			for _, b := range bList {
				label := fmt.Sprintf("S=%d d=%d batch=%d", f.shards, d, b)
				// The run's costs, measured just before it: this machine's speed drifts over a
				// command this long, and the validation compares like with like.
				fmt.Printf("  %s: its costs\n", label)
				stop, err := profile("costs", d, b)
				if err != nil {
					return err
				}
				sharedCost, err := measure(f.nodes/max(f.shards, 1), f.shards, d, runShared)
				if err != nil {
					return err
				}
				stop()
				aloneCost, err := measure(f.nodes/max(f.shards, 1), f.shards, d, alone)
				if err != nil {
					return err
				}
				encodeUs, err := intakeCost(f.shards, d, b)
				if err != nil {
					return err
				}
				if stop, err = profile("run", d, b); err != nil {
					return err
				}
				r, err := sim.Simulate(ctx, sim.Config{Nodes: f.nodes, Pods: f.pods, Shards: f.shards, Fanout: 10, Parallelism: 1,
					EquivalenceTTL: 2 * time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: d, Batch: batchFlag(b), ParallelPods: 1,
					Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
				stop()
				if err != nil {
					return fmt.Errorf("%s: %w", label, err)
				}
				predict := func(sc *shardCosts) model.Result {
					return predictInProcess(inProcessRun{Pods: f.pods, Shards: f.shards, Collectors: 1, D: d, Batch: b}, encodeUs, hops, api, sc)
				}
				p, pa := predict(sharedCost), predict(aloneCost)
				row := runRow{Label: label, Sim: r, Costs: []*shardCosts{sharedCost, aloneCost}, Predicted: &p, ErrorPct: 100 * (p.Seconds - r.Seconds) / r.Seconds,
					PredictedAlone: &pa, ErrorAlonePct: 100 * (pa.Seconds - r.Seconds) / r.Seconds,
					PodsPerCPU: float64(r.Bound) / r.CPUSeconds}
				rows = append(rows, row)
				printRun(row.Label, r, row.PodsPerCPU)
				fmt.Printf("      model with the shared costs predicted %.1f s (measured %.1f s): error %+.1f %%; with the alone costs %.1f s: %+.1f %%\n",
					p.Seconds, r.Seconds, row.ErrorPct, pa.Seconds, row.ErrorAlonePct)
				fmt.Printf("      frames sent %d (re-sent %d), model %d; shard evaluations %d, model %d; CPU %.1f s, model's busy %s\n",
					r.Frames, r.Resent, p.Attempts, r.Evaluations, p.Evaluations, r.CPUSeconds, busyText(p))
			}
		}
		if f.refNodes > 0 {
			fmt.Printf("== placement quality at %d nodes, %d pods: kube-scheduler's algorithm vs meganode (S=%d d=%d batch=%d)\n",
				f.refNodes, f.refNodes, f.shards, dList[0], bList[len(bList)-1])
			ref, err := sim.Simulate(ctx, sim.Config{Nodes: f.refNodes, Pods: f.refNodes, Shards: 1, Fanout: 10, Parallelism: 16,
				EquivalenceTTL: -1, FeasibleToFind: shard.FeasibleAuto, Scatter: collector.ScatterAll, Batch: -1, ParallelPods: 1,
				Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
			if err != nil {
				return err
			}
			rows = append(rows, runRow{Label: "kube-scheduler's algorithm", Sim: ref, PodsPerCPU: float64(ref.Bound) / ref.CPUSeconds})
			printRun("kube-scheduler's algorithm", ref, float64(ref.Bound)/ref.CPUSeconds)
			mg, err := sim.Simulate(ctx, sim.Config{Nodes: f.refNodes, Pods: f.refNodes, Shards: f.shards, Fanout: 10, Parallelism: 1,
				EquivalenceTTL: 2 * time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: dList[0], Batch: batchFlag(bList[len(bList)-1]),
				ParallelPods: 1, Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
			if err != nil {
				return err
			}
			l := fmt.Sprintf("meganode S=%d d=%d batch=%d", f.shards, dList[0], bList[len(bList)-1])
			rows = append(rows, runRow{Label: l, Sim: mg, PodsPerCPU: float64(mg.Bound) / mg.CPUSeconds})
			printRun(l, mg, float64(mg.Bound)/mg.CPUSeconds)
		}
		out["runs"] = rows
	}

	// 4. Projection.
	type proj struct {
		Shards, D, K, Batch int
		Costs               string       `json:"costs"`
		Result              model.Result `json:"result"`
	}
	var projs []proj
	fmt.Printf("== projection: %d pods on %d nodes, %d collectors, dedicated cores, costs measured above at each shard size, hop latency %.0f µs, binds %s\n",
		f.tPods, f.tNodes, f.tCollectors, f.hopLat, rateText(f.bindRate))
	fmt.Printf("  %-22s %6s %3s %3s %6s %10s %10s %8s %8s  %s\n", "costs", "shards", "d", "K", "batch", "seconds", "pods/s", "cores", "p99 ms", "bottleneck")
	for _, o := range conditions {
		for _, s := range sList {
			for _, d := range tdList {
				sc := costs[costKey(need{f.tNodes / s, s, d, o})]
				for _, k := range kList {
					for _, b := range bList {
						encodeUs, err := intakeCost(s, d, b)
						if err != nil {
							return err
						}
						in := model.Input{Pods: f.tPods, Shards: s, Workers: k, Collectors: f.tCollectors,
							Window: max(64, 8*s*d/f.tCollectors), Fanout: 10, Scatter: model.ScatterSampled, D: d, Batch: b, Classes: 1,
							EncodeUs: encodeUs, HopUs: hops.GRPCFrameUs, EvalUs: sc.Single.EvalCPUUs + hops.GRPCStreamPropUs,
							BatchFirstUs: sc.Batch.FirstCPUUs + hops.GRPCStreamPropUs, BatchNextUs: sc.Batch.NextCPUUs,
							ProposalUs: 2 * hops.GRPCStreamPropUs, DecisionUs: hops.CollectorUs, CommitUs: commitCost(sc, b), ReleaseUs: sc.Batch.ReleaseCPUUs,
							BindPerSec: f.bindRate, HopLatencyUs: f.hopLat, CV: 0.3, Seed: 1}
						r := model.Run(in)
						projs = append(projs, proj{Shards: s, D: d, K: k, Batch: b, Costs: conditionText(o), Result: r})
						fmt.Printf("  %-22s %6d %3d %3d %6d %10.1f %10.0f %8d %8.1f  %s\n", conditionText(o), s, d, k, b, r.Seconds, r.PodsPerSec,
							r.Cores, r.LatencyP99Ms, r.Bottleneck)
					}
				}
			}
		}
	}
	out["projection"] = projs
	if f.jsonOut != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(f.jsonOut, b, 0o644)
	}
	return nil
}

// measureShardCosts measures what one pod costs a shard of n nodes (of shardsN shards, pods
// sampled to d of them: the feasible-node target of scheduler.FeasibleLimitSampled) under o,
// singly and in batches of maxBatch, stagePods pods per round, and prints it.
func measureShardCosts(ctx context.Context, n, shardsN, d, stagePods, maxBatch int, o shard.MeasureOpts) (*shardCosts, error) {
	limit := shard.FeasibleLimitSampled(n, shardsN, d)
	single, err := shard.Measure(ctx, n, stagePods, 2*time.Second, limit, o)
	if err != nil {
		return nil, err
	}
	bc, err := shard.MeasureBatch(ctx, n, max(stagePods/max(maxBatch, 1), 4*o.Shards), max(maxBatch, 2), 2*time.Second, limit, o)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%d feasible", limit)
	if limit == 0 {
		what = "every node"
	}
	fmt.Printf("  shard of %7d nodes (S=%d, d=%d: %s), %s: one pod %.0f µs (decode %.0f, eval %.0f, reserve %.0f) + commit %.0f µs; in CPU %.0f + %.0f µs\n",
		n, shardsN, d, what, conditionText(single.Opts), single.DecodeUs+single.EvalUs+single.ReserveUs, single.DecodeUs, single.EvalUs,
		single.ReserveUs, single.CommitUs, single.EvalCPUUs, single.CommitCPUUs)
	fmt.Printf("      batch of %d: first %.0f µs, each next %.0f µs (%.0f µs/pod); in CPU first %.0f, next %.0f, commit %.0f µs/pod, release %.0f µs/slot\n",
		bc.Batch, bc.FirstUs, bc.NextUs, bc.PerPodUs, bc.FirstCPUUs, bc.NextCPUUs, bc.CommitCPUUs, bc.ReleaseCPUUs)
	return &shardCosts{Nodes: n, Shared: o.Shards > 1, Single: single, Batch: bc}, nil
}

// inProcessRun is the shape of an in-process run (sim.Simulate) the model predicts.
type inProcessRun struct {
	Pods, Shards, Collectors, D, Batch int
}

// predictInProcess is the model's prediction of an in-process run on this machine's cores
// (one shared CPU pool, relays in process, the fake apiserver's cost per pod), fed with the
// shard costs sc measured under the run's conditions, the intake's CPU per pod and the hops.
func predictInProcess(r inProcessRun, encodeUs float64, hops sim.HopCosts, api sim.FakeAPICost, sc *shardCosts) model.Result {
	collectors := max(r.Collectors, 1)
	in := model.Input{Pods: r.Pods, Shards: r.Shards, Workers: 1, Collectors: collectors,
		Window: max(64, 8*r.Shards*r.D/collectors), Fanout: 10, Scatter: model.ScatterSampled, D: r.D, Batch: r.Batch, Classes: 1,
		EncodeUs: encodeUs, HopUs: hops.RelayChildUs, EvalUs: sc.Single.EvalCPUUs,
		BatchFirstUs: sc.Batch.FirstCPUUs, BatchNextUs: sc.Batch.NextCPUUs, ProposalUs: hops.CollectorUs, DecisionUs: hops.CollectorUs,
		CommitUs: commitCost(sc, r.Batch), ReleaseUs: sc.Batch.ReleaseCPUUs, ApiUs: api.CPUUsPerPod,
		ApiConcurrency: max(1, int(math.Round(api.Concurrency))), Cores: runtime.NumCPU(), Seed: 1}
	if r.D >= r.Shards {
		in.Scatter = model.ScatterAll
	}
	return model.Run(in)
}

// conditionText names a cost measurement's conditions.
func conditionText(o shard.MeasureOpts) string {
	if o.Shards <= 1 {
		return "alone (1 shard, 1 core)"
	}
	return fmt.Sprintf("shared (%d shards on %d cores)", o.Shards, runtime.NumCPU())
}

// busyText is the model's CPU-seconds per stage.
func busyText(r model.Result) string {
	t := ""
	for _, st := range r.Stages {
		if t != "" {
			t += ", "
		}
		t += fmt.Sprintf("%s %.1f s", st.Name, st.BusySeconds)
	}
	return t
}

func batchFlag(b int) int {
	if b <= 1 {
		return -1
	}
	return b
}

func rateText(r float64) string {
	if r <= 0 {
		return "not a limit"
	}
	return fmt.Sprintf("%.0f/s", r)
}

func printRun(label string, r *sim.Result, perCPU float64) {
	fmt.Printf("  %-30s %7d pods in %6.1f s = %6.0f pods/s, %6.0f pods per CPU-second (%.0f µs CPU/pod), evaluations %d, widened %d; pods per node stdev %.3f, max %d, empty nodes %d\n",
		label, r.Bound, r.Seconds, r.PodsPerSec, perCPU, r.CPUSeconds/float64(max(r.Bound, 1))*1e6, r.Evaluations, r.Widened,
		r.StddevPerNode, r.MaxPerNode, r.EmptyNodes)
}
