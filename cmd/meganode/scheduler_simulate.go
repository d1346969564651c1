package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

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

func runSchedulerSimulate(args []string) error {
	fs := flag.NewFlagSet("scheduler simulate", flag.ContinueOnError)
	nodes := fs.Int("nodes", 100000, "in-process runs: fake nodes (8 CPU, 32 GiB, as `up`'s KWOK nodes)")
	pods := fs.Int("pods", 100000, "in-process runs: pods (100m, 64Mi, one ReplicaSet)")
	shards := fs.Int("shards", 16, "in-process runs: shards")
	scatters := fs.String("scatter-list", "2,4", "in-process runs: --scatter values")
	batches := fs.String("batch-list", "1,32", "in-process runs: --batch values (1: off)")
	refNodes := fs.Int("reference-nodes", 20000, "kube-scheduler's algorithm (1 shard, scatter all, no batch, one pod at a time) on this many nodes and pods, and meganode's first mode at the same size, for placement quality (0: skip)")
	stagePods := fs.Int("stage-pods", 1000, "pods timed per shard-cost measurement round")
	rounds := fs.Int("cost-rounds", 3, "rounds per shard-cost measurement (the median round is used)")
	interleave := fs.Int("cost-interleave", 16, "projection: also measure the target-size costs with this many shards, each on its own goroutine, sharing this machine's cores (shards sharing a host's caches; 0: alone only)")
	tNodes := fs.Int("target-nodes", 1_000_000, "projection: nodes")
	tPods := fs.Int("target-pods", 1_000_000, "projection: pods")
	tShards := fs.String("target-shards", "256,1024", "projection: shard counts")
	tD := fs.String("target-scatter", "2", "projection: d values")
	tK := fs.String("target-parallel-pods", "1,4", "projection: pods evaluated at once per shard (cores per shard)")
	tCollectors := fs.Int("target-collectors", 16, "projection: collectors")
	bindRate := fs.Float64("bind-rate", 0, "projection: apiserver Binding throughput in pods/s (0: not a limit; the seed's 5 apiservers are outside the scheduler's cores)")
	hopLat := fs.Float64("hop-latency-us", 100, "projection: network delay per message")
	binds := fs.String("binds", "counted", "in-process runs: counted (Bindings recorded, no object write or watch event: the scheduler's own cost) or api (the fake apiserver writes each pod and every informer receives it: ≈2.7 ms CPU per pod, the runs' bottleneck past a few shards)")
	skipRuns := fs.Bool("skip-runs", false, "costs and projection only (no in-process runs, no validation)")
	jsonOut := fs.String("json", "", "write every measurement, run, prediction and projection as JSON here")
	cpuProfile := fs.String("cpuprofile", "", "in-process runs: write CPU profiles with this prefix, one per run and one per run's shared cost measurement (<prefix>-run-d2-b32.pprof, <prefix>-costs-d2-b32.pprof), so the run's CPU can be compared with what its measurement saw")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	var dList, bList, sList, tdList, kList []int
	for _, l := range []struct {
		flag string
		v    *string
		out  *[]int
	}{{"scatter-list", scatters, &dList}, {"batch-list", batches, &bList}, {"target-shards", tShards, &sList},
		{"target-scatter", tD, &tdList}, {"target-parallel-pods", tK, &kList}} {
		var err error
		if *l.out, err = parseInts(*l.v); err != nil {
			return fmt.Errorf("--%s: %w", l.flag, err)
		}
	}
	if *binds != "counted" && *binds != "api" {
		return fmt.Errorf("--binds: want counted or api, got %q", *binds)
	}
	counted := *binds == "counted"
	maxBatch := 1
	for _, b := range bList {
		maxBatch = max(maxBatch, b)
	}
	out := map[string]any{"command": os.Args, "cores_here": runtime.NumCPU()}

	// 1. Costs.
	// A shard's feasible-node target depends on S and d (scheduler.FeasibleLimitSampled): the d
	// shards of a pod together examine what kube-scheduler examines over the whole cluster.
	measure := func(n, shardsN, d int, o shard.MeasureOpts) (*shardCosts, error) {
		limit := shard.FeasibleLimitSampled(n, shardsN, d)
		single, err := shard.Measure(ctx, n, *stagePods, 2*time.Second, limit, o)
		if err != nil {
			return nil, err
		}
		bc, err := shard.MeasureBatch(ctx, n, max(*stagePods/max(maxBatch, 1), 4*o.Shards), max(maxBatch, 2), 2*time.Second, limit, o)
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
	fmt.Printf("== costs measured here (real framework and default plugins, kube-scheduler's sampling rule per shard)\n")
	costs := map[string]*shardCosts{}
	type need struct {
		nodes, shards, d int
		o                shard.MeasureOpts
	}
	costKey := func(k need) string {
		return fmt.Sprintf("%d nodes/S=%d/d=%d/%s", k.nodes, k.shards, k.d, conditionText(k.o))
	}
	alone := shard.MeasureOpts{Shards: 1, Workers: 1, Rounds: *rounds}
	runShared := shard.MeasureOpts{Shards: *shards, Workers: *shards, Rounds: *rounds}
	targetShared := shard.MeasureOpts{Shards: *interleave, Workers: *interleave, Rounds: *rounds}
	var needs []need // the runs' own costs are measured just before each run (below)
	conditions := []shard.MeasureOpts{alone}
	if *interleave > 1 {
		conditions = append(conditions, targetShared)
	}
	for _, s := range sList {
		for _, d := range tdList {
			for _, o := range conditions {
				needs = append(needs, need{*tNodes / s, s, d, o})
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
	if !*skipRuns {
		api, err := sim.MeasureFakeAPI(ctx, *nodes, min(*pods, 20000), counted)
		if err != nil {
			return err
		}
		out["fake_api"] = api
		fmt.Printf("  in-process fake apiserver (--binds %s): %.0f µs CPU per pod, %.0f µs wall with 16 binders: it uses %.2f cores\n",
			*binds, api.CPUUsPerPod, api.WallUsPerPod, api.Concurrency)
		apiConc := max(1, int(math.Round(api.Concurrency)))
		// profile starts a CPU profile of one phase (nothing without --cpuprofile); the returned
		// func stops it. One file per phase: the run and its cost measurement are in one process,
		// and only separate profiles tell which of them spent what.
		profile := func(phase string, d, b int) (func(), error) {
			if *cpuProfile == "" {
				return func() {}, nil
			}
			f, err := os.Create(fmt.Sprintf("%s-%s-d%d-b%d.pprof", *cpuProfile, phase, d, b))
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return nil, err
			}
			return func() { pprof.StopCPUProfile(); f.Close() }, nil
		}
		fmt.Printf("== in-process runs: %d nodes, %d pods (pre-created), %d shards, %d cores shared by everything\n", *nodes, *pods, *shards, runtime.NumCPU())
		for _, d := range dList {
			for _, b := range bList {
				label := fmt.Sprintf("S=%d d=%d batch=%d", *shards, d, b)
				// The run's costs, measured just before it: this machine's speed drifts over a
				// command this long, and the validation compares like with like.
				fmt.Printf("  %s: its costs\n", label)
				stop, err := profile("costs", d, b)
				if err != nil {
					return err
				}
				sharedCost, err := measure(*nodes/max(*shards, 1), *shards, d, runShared)
				if err != nil {
					return err
				}
				stop()
				aloneCost, err := measure(*nodes/max(*shards, 1), *shards, d, alone)
				if err != nil {
					return err
				}
				encodeUs, err := intakeCost(*shards, d, b)
				if err != nil {
					return err
				}
				if stop, err = profile("run", d, b); err != nil {
					return err
				}
				r, err := sim.Simulate(ctx, sim.Config{Nodes: *nodes, Pods: *pods, Shards: *shards, Fanout: 10, Parallelism: 1,
					EquivalenceTTL: 2 * time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: d, Batch: batchFlag(b), ParallelPods: 1,
					Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
				stop()
				if err != nil {
					return fmt.Errorf("%s: %w", label, err)
				}
				predict := func(sc *shardCosts) model.Result {
					in := model.Input{Pods: *pods, Shards: *shards, Workers: 1, Collectors: 1,
						Window: max(64, 8**shards*d), Fanout: 10, Scatter: model.ScatterSampled, D: d, Batch: b, Classes: 1,
						EncodeUs: encodeUs, HopUs: hops.RelayChildUs, EvalUs: sc.Single.EvalCPUUs,
						BatchFirstUs: sc.Batch.FirstCPUUs, BatchNextUs: sc.Batch.NextCPUUs, ProposalUs: hops.CollectorUs, DecisionUs: hops.CollectorUs,
						CommitUs: commitCost(sc, b), ReleaseUs: sc.Batch.ReleaseCPUUs, ApiUs: api.CPUUsPerPod, ApiConcurrency: apiConc, Cores: runtime.NumCPU(), Seed: 1}
					if d >= *shards {
						in.Scatter = model.ScatterAll
					}
					return model.Run(in)
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
		if *refNodes > 0 {
			fmt.Printf("== placement quality at %d nodes, %d pods: kube-scheduler's algorithm vs meganode (S=%d d=%d batch=%d)\n",
				*refNodes, *refNodes, *shards, dList[0], bList[len(bList)-1])
			ref, err := sim.Simulate(ctx, sim.Config{Nodes: *refNodes, Pods: *refNodes, Shards: 1, Fanout: 10, Parallelism: 16,
				EquivalenceTTL: -1, FeasibleToFind: shard.FeasibleAuto, Scatter: collector.ScatterAll, Batch: -1, ParallelPods: 1,
				Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
			if err != nil {
				return err
			}
			rows = append(rows, runRow{Label: "kube-scheduler's algorithm", Sim: ref, PodsPerCPU: float64(ref.Bound) / ref.CPUSeconds})
			printRun("kube-scheduler's algorithm", ref, float64(ref.Bound)/ref.CPUSeconds)
			mg, err := sim.Simulate(ctx, sim.Config{Nodes: *refNodes, Pods: *refNodes, Shards: *shards, Fanout: 10, Parallelism: 1,
				EquivalenceTTL: 2 * time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: dList[0], Batch: batchFlag(bList[len(bList)-1]),
				ParallelPods: 1, Precreate: true, GlobalView: "off", CountedBinds: counted, Timeout: 30 * time.Minute})
			if err != nil {
				return err
			}
			l := fmt.Sprintf("meganode S=%d d=%d batch=%d", *shards, dList[0], bList[len(bList)-1])
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
		*tPods, *tNodes, *tCollectors, *hopLat, rateText(*bindRate))
	fmt.Printf("  %-22s %6s %3s %3s %6s %10s %10s %8s %8s  %s\n", "costs", "shards", "d", "K", "batch", "seconds", "pods/s", "cores", "p99 ms", "bottleneck")
	for _, o := range conditions {
		for _, s := range sList {
			for _, d := range tdList {
				sc := costs[costKey(need{*tNodes / s, s, d, o})]
				for _, k := range kList {
					for _, b := range bList {
						encodeUs, err := intakeCost(s, d, b)
						if err != nil {
							return err
						}
						in := model.Input{Pods: *tPods, Shards: s, Workers: k, Collectors: *tCollectors,
							Window: max(64, 8*s*d / *tCollectors), Fanout: 10, Scatter: model.ScatterSampled, D: d, Batch: b, Classes: 1,
							EncodeUs: encodeUs, HopUs: hops.GRPCFrameUs, EvalUs: sc.Single.EvalCPUUs + hops.GRPCStreamPropUs,
							BatchFirstUs: sc.Batch.FirstCPUUs + hops.GRPCStreamPropUs, BatchNextUs: sc.Batch.NextCPUUs,
							ProposalUs: 2 * hops.GRPCStreamPropUs, DecisionUs: hops.CollectorUs, CommitUs: commitCost(sc, b), ReleaseUs: sc.Batch.ReleaseCPUUs,
							BindPerSec: *bindRate, HopLatencyUs: *hopLat, CV: 0.3, Seed: 1}
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
	if *jsonOut != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonOut, b, 0o644)
	}
	return nil
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
