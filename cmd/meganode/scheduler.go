package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/scheduler"
)

func init() {
	register("scheduler", "run the meganode scheduler (sharded scatter/gather on the kube-scheduler framework); `scheduler simulate` projects 1M nodes", runScheduler)
}

func runScheduler(args []string) error {
	if len(args) > 0 && args[0] == "simulate" {
		return runSchedulerSimulate(args[1:])
	}
	if len(args) > 0 && args[0] == "bench" {
		return runSchedulerBench(args[1:])
	}
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	role := fs.String("role", "all", "all (everything in this process) | shard | relay | collector")
	shards := fs.Int("shards", 1, "number of shards")
	collectors := fs.Int("collectors", 1, "number of collectors (each with its own intake of the pods hashing to it)")
	fanout := fs.Int("fanout", 10, "relay tree fanout")
	name := fs.String("scheduler-name", scheduler.DefaultSchedulerName, "spec.schedulerName(s) to serve, comma-separated (the first names the framework profile)")
	fraction := fs.Float64("fraction", 1, "decide once this fraction of shards answered (stragglers: see --deadline)")
	deadline := fs.Duration("deadline", 250*time.Millisecond, "decide this long after the first answer even if shards are missing")
	inflight := fs.Int("inflight", 64, "per collector: pod attempts between scatter and decision (keeps shards in step)")
	bindWorkers := fs.Int("bind-workers", 256, "per shard: binds (and evictions) in flight to the apiserver at once")
	eqTTL := fs.Duration("equivalence-ttl", 2*time.Second, "reuse filter results of identical pods for this long (0: off)")
	parallelism := fs.Int("parallelism", 16, "framework parallelism per shard")
	queue := fs.Int("queue", 1024, "bounded queue length per hop (back-pressure)")
	deadAfter := fs.Duration("dead-after", 3*time.Second, "role all: a shard silent this long is declared dead and its nodes taken over")
	qps := fs.Float64("kube-api-qps", 5000, "client QPS (binds)")
	feasibleRun := fs.String("feasible-to-find", "auto", "per shard: stop filtering after this many feasible nodes: auto (kube-scheduler's adaptive percentageOfNodesToScore over the shard's own nodes: 1 shard samples as stock does, more shards examine more), all, or a count")
	globalView := fs.String("global-view", "auto", "auto: pods with pod (anti-)affinity or topology spread are evaluated on a per-shard view of all nodes and pods (O(N) memory per shard) and serialised per constraint group | off: every pod sees only its shard's nodes")
	health := fs.String("healthz", "", "127.0.0.1:port for /healthz and /metrics")
	listen := fs.String("listen", "", "roles shard/relay/collector: 127.0.0.1:port to serve gRPC on")
	index := fs.Int("index", 0, "roles shard/collector: this process's shard or collector index")
	children := fs.String("children", "", "role relay: comma-separated child addresses")
	colAddrs := fs.String("collector-addrs", "", "role shard (and role collector with --intake webhook, to forward pods to their collector): comma-separated collector addresses, by index")
	shardAddrs := fs.String("shard-addrs", "", "role collector: comma-separated shard addresses, by index")
	root := fs.String("root", "", "role collector: address of the root relay")
	intake := fs.String("intake", scheduler.IntakeWatch, "how pods come in: watch (a field-selected watch on unscheduled pods) or webhook (a validating admission webhook sees each pod at creation, plus a periodic LIST); roles all and collector")
	whAddr := fs.String("webhook-addr", "127.0.0.1:9443", "--intake webhook: where the HTTPS admission webhook listens (path "+scheduler.WebhookPath+")")
	whCert := fs.String("webhook-cert", "", "--intake webhook: serving certificate (PEM); without it and --webhook-key, a CA and a certificate are generated")
	whKey := fs.String("webhook-key", "", "--intake webhook: serving key (PEM)")
	whCA := fs.String("webhook-ca-file", "", "--intake webhook with a generated certificate: write the CA bundle (the webhook configuration's caBundle) here (default: a new temporary directory)")
	reconcile := fs.Duration("reconcile-every", 10*time.Second, "--intake webhook: LIST unscheduled pods this often (the pods the webhook missed, and the ones gone)")
	scatter := fs.String("scatter", strconv.Itoa(scheduler.DefaultScatter), "shards each pod is sent to: N (power of N choices; widened to every shard when none of the N has room; pods with inter-pod constraints go to every shard) or all (every shard, through the relay tree)")
	batch := fs.Int("batch", scheduler.DefaultBatch, "at most this many pods of one equivalence class placed from one Filter+Score pass (1: off)")
	parallelPods := fs.Int("parallel-pods", 0, "pods a shard evaluates at once (0: role all: cores / shards; role shard: every core)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	scatterN, err := scheduler.ParseScatter(*scatter)
	if err != nil {
		return err
	}
	batchN := *batch
	if batchN <= 1 {
		batchN = -1
	}
	eq := *eqTTL
	if eq == 0 {
		eq = -1
	}
	ftf, err := scheduler.ParseFeasibleToFind(*feasibleRun)
	if err != nil {
		return err
	}
	cfg := scheduler.Config{Kubeconfig: *kubeconfig, SchedulerName: *name, Shards: *shards, Collectors: *collectors, Fanout: *fanout,
		Fraction: *fraction, Deadline: *deadline, EquivalenceTTL: eq, Parallelism: *parallelism, QueueLen: *queue,
		DeadAfter: *deadAfter, HealthAddr: *health, QPS: float32(*qps), FeasibleToFind: ftf, InFlight: *inflight, BindWorkers: *bindWorkers,
		Intake: *intake, Webhook: scheduler.WebhookOptions{Addr: *whAddr, CertFile: *whCert, KeyFile: *whKey, CAFile: *whCA, ReconcileEvery: *reconcile},
		GlobalView: *globalView, Scatter: scatterN, Batch: batchN, ParallelPods: *parallelPods}
	if *role != "all" {
		return scheduler.RunRole(ctx, *role, cfg, scheduler.RoleConfig{Index: *index, Listen: *listen,
			Children: scheduler.SplitAddrs(*children), Collectors: scheduler.SplitAddrs(*colAddrs),
			ShardAddrs: scheduler.SplitAddrs(*shardAddrs), Root: *root})
	}
	if *kubeconfig == "" {
		return fmt.Errorf("--kubeconfig (or $KUBECONFIG) is required")
	}
	sys, err := scheduler.StartAll(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "meganode scheduler: %d shard(s), %d relay(s) (fanout %d), %d collector(s), serving spec.schedulerName=%s, intake %s\n",
		len(sys.Shards), sys.Relays, *fanout, len(sys.Collectors), *name, *intake)
	for _, sh := range sys.Shards {
		fmt.Fprintf(os.Stderr, "  shard %d: %d nodes\n", sh.Index(), sh.NodeCount())
	}
	<-ctx.Done()
	return nil
}

func runSchedulerSimulate(args []string) error {
	fs := flag.NewFlagSet("scheduler simulate", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1000, "fake nodes for the end-to-end in-process run")
	pods := fs.Int("pods", 2000, "pods for the end-to-end run")
	shards := fs.Int("shards", 2, "shards for the end-to-end run")
	fanout := fs.Int("fanout", 10, "relay fanout")
	parallelism := fs.Int("parallelism", 16, "framework parallelism per shard in the end-to-end run")
	tNodes := fs.Int("target-nodes", 1_000_000, "projection: nodes")
	tPods := fs.Int("target-pods", 1_000_000, "projection: pods")
	tShards := fs.Int("target-shards", 256, "projection: shards")
	tCollectors := fs.Int("target-collectors", 16, "projection: collectors")
	stagePods := fs.Int("stage-pods", 1000, "pods timed on one shard of target-nodes/target-shards nodes (parallelism 1)")
	coresPerShard := fs.Float64("cores-per-shard", 1, "projection: cores per shard process")
	eff := fs.Float64("parallel-efficiency", 0.8, "projection: efficiency of Filter/Score parallelism over those cores")
	bindRate := fs.Float64("bind-rate", 0, "projection: apiserver Binding throughput (pods/s; 0: not modelled)")
	intakeRate := fs.Float64("intake-rate", 0, "projection: intake throughput per collector (pods/s; 0: only the encode cost)")
	hopLat := fs.Float64("hop-latency-us", 100, "projection: one network hop (latency only)")
	jsonOut := fs.String("json", "", "write all results as JSON here")
	feasible := fs.Int("feasible-to-find", 100, "stage timing: also time a shard that stops filtering after this many feasible nodes (0: skip)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole simulation here")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	out := map[string]any{}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	fmt.Printf("== end-to-end in process (fake clientset, real framework): %d nodes, %d pods, %d shards, fanout %d, parallelism %d\n",
		*nodes, *pods, *shards, *fanout, *parallelism)
	for _, eq := range []time.Duration{2 * time.Second, -1} {
		r, err := scheduler.Simulate(ctx, scheduler.SimConfig{Nodes: *nodes, Pods: *pods, Shards: *shards, Fanout: *fanout,
			Parallelism: *parallelism, EquivalenceTTL: eq})
		if err != nil {
			return err
		}
		label := map[bool]string{true: "equivalence on", false: "equivalence off"}[eq > 0]
		fmt.Printf("  %-16s %d pods in %.2fs = %.0f pods/s, CPU %.0f µs/pod, conflicts %d, filter verdicts reused %.0f%%, schedule latency p50 %.1f ms p99 %.1f ms\n",
			label, r.Bound, r.Seconds, r.PodsPerSec, r.CPUSeconds/float64(r.Bound)*1e6, r.Conflicts, r.FilterReused*100,
			r.Collector["schedule"].P50Us/1e3, r.Collector["schedule"].P99Us/1e3)
		out["e2e_"+map[bool]string{true: "eq", false: "noeq"}[eq > 0]] = r
	}

	shardSize := *tNodes / max(*tShards, 1)
	fmt.Printf("== one shard of %d nodes (= %d/%d), parallelism 1 (per-core cost), %d identical pods, no apiserver in the loop (decode → framework cycle → Reserve+assume)\n",
		shardSize, *tNodes, *tShards, *stagePods)
	type variant struct {
		label    string
		eq       time.Duration
		feasible int
		cost     *scheduler.ShardCost
	}
	vs := []*variant{{label: "equivalence on, every node examined", eq: 2 * time.Second},
		{label: "equivalence off, every node examined", eq: -1},
		{label: fmt.Sprintf("equivalence on, auto: stop at %d feasible nodes", scheduler.FeasibleLimit(scheduler.FeasibleAuto, shardSize)),
			eq: 2 * time.Second, feasible: scheduler.FeasibleAuto}}
	if *feasible > 0 {
		vs = append(vs, &variant{label: fmt.Sprintf("equivalence on, stop at %d feasible nodes", *feasible), eq: 2 * time.Second, feasible: *feasible})
	}
	for _, v := range vs {
		c, err := scheduler.MeasureShard(ctx, shardSize, *stagePods, v.eq, v.feasible)
		if err != nil {
			return err
		}
		v.cost = c
		fmt.Printf("  %-44s decode %.1f µs, snapshot %.1f, prefilter %.1f, filter %.1f, score %.1f → eval %.1f µs; reserve+assume %.1f µs; process CPU %.0f µs/pod; filter verdicts reused %.0f%%\n",
			v.label+":", c.DecodeUs, c.Stages["snapshot"], c.Stages["prefilter"], c.Stages["filter"], c.Stages["score"], c.EvalUs, c.CommitUs, c.CPUUsPerPod, c.FilterReused*100)
		out["shard: "+v.label] = c
	}

	hops, err := scheduler.MeasureHops(ctx)
	if err != nil {
		return err
	}
	out["hops"] = hops
	fmt.Printf("== hops: encode %.2f µs (%d B frame), relay→child in-process %.2f µs, gRPC stream frame %.2f µs, proposal on the control stream %.2f µs (unary would be %.1f µs), collector per proposal in-process %.2f µs\n",
		hops.EncodeUs, hops.FrameBytes, hops.RelayChildUs, hops.GRPCFrameUs, hops.GRPCStreamPropUs, hops.GRPCUnaryUs, hops.CollectorUs)

	for _, v := range vs {
		in := scheduler.ProjectionInput{Nodes: *tNodes, Pods: *tPods, Shards: *tShards, Fanout: *fanout, Collectors: *tCollectors,
			ShardEvalUs: v.cost.DecodeUs + v.cost.EvalUs + hops.GRPCStreamPropUs, CommitUs: v.cost.CommitUs, EncodeUs: hops.EncodeUs,
			HopUs: hops.GRPCFrameUs,
			// per shard per pod at the collector: one proposal in and (for feasible losers) one deny out, both on streams
			ProposalUs: 2 * hops.GRPCStreamPropUs, CoresPerShard: *coresPerShard, ParallelEff: *eff, BindPerSec: *bindRate,
			IntakePerSec: *intakeRate, HopLatencyUs: *hopLat}
		p := scheduler.Project(in)
		fmt.Printf("== projection, %s\n", v.label)
		p.Print(os.Stdout, in)
		out["projection: "+v.label] = map[string]any{"input": in, "output": p}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(out, "", "  ")
		return os.WriteFile(*jsonOut, b, 0o644)
	}
	_ = context.Background
	return nil
}

// schedulerUpFlags are `up`'s scheduler flags (also `demo`, which shares addUpFlags).
type schedulerUpFlags struct {
	scheduler *string
	shards    *int
	intake    *string
	args      stringList
}

func addSchedulerUpFlags(fs *flag.FlagSet) *schedulerUpFlags {
	f := &schedulerUpFlags{
		scheduler: fs.String("scheduler", cluster.SchedulerKube, "scheduler to run: kube-scheduler (stock) or meganode (sharded; serves spec.schedulerName=meganode)"),
		shards:    fs.Int("shards", 1, "with --scheduler meganode: scheduler shards"),
		intake:    fs.String("intake", cluster.IntakeWatch, "with --scheduler meganode: watch (the scheduler watches unscheduled pods) or webhook (it serves a validating admission webhook on 127.0.0.1, registered by up with failurePolicy Ignore)"),
	}
	fs.Var(&f.args, "scheduler-arg", "extra `meganode scheduler` flag (repeatable), e.g. --scheduler-arg=--fraction=0.9")
	return f
}

func (f *schedulerUpFlags) kind() string {
	if f == nil {
		return ""
	}
	return *f.scheduler
}

func (f *schedulerUpFlags) shardCount() int {
	if f == nil {
		return 0
	}
	return *f.shards
}

func (f *schedulerUpFlags) intakeMode() string {
	if f == nil {
		return ""
	}
	return *f.intake
}

func (f *schedulerUpFlags) extra() []string {
	if f == nil {
		return nil
	}
	return f.args
}

func runSchedulerBench(args []string) error {
	fs := flag.NewFlagSet("scheduler bench", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1000, "KWOK nodes")
	pods := fs.Int("pods", 2000, "pods pre-created while the scheduler is paused, then drained")
	shardList := fs.String("shards", "1,2,4", "meganode shard counts to run")
	noStock := fs.Bool("no-stock", false, "skip the stock kube-scheduler run")
	latPods := fs.Int("latency-pods", 500, "pods of the paced latency phase (0: skip)")
	latQPS := fs.Float64("latency-qps", 100, "creation rate of the latency phase")
	stateDir := fs.String("state-dir", filepath.Join(os.TempDir(), "meganode-sched-bench"), "state directory for the clusters (one at a time)")
	jsonOut := fs.String("json", "", "write the rows as JSON here")
	nodeLease := fs.Int("node-lease-seconds", 0, "KWOK node lease duration (0 = 40 s); e.g. 600 at 10K nodes keeps lease writes from saturating the apiserver on a small machine")
	profileDir := fs.String("profile-dir", "", "meganode runs: save a CPU profile of the scheduler during the drain here (<label>.pprof)")
	profileSec := fs.Int("profile-seconds", 15, "length of that profile")
	var extra stringList
	fs.Var(&extra, "scheduler-arg", "extra `meganode scheduler` flag (repeatable)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	var shards []int
	for _, s := range scheduler.SplitAddrs(*shardList) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("--shards: %w", err)
		}
		shards = append(shards, n)
	}
	ctx, stop := signalContext()
	defer stop()
	o := scheduler.BenchOptions{Nodes: *nodes, Pods: *pods, Shards: shards, NoStock: *noStock, LatencyPods: *latPods, LatencyQPS: *latQPS,
		StateDir: *stateDir, SchedulerArg: extra, NodeLeaseSec: *nodeLease, ProfileDir: *profileDir, ProfileSec: *profileSec, Progress: bench.NewProgress(os.Stderr)}
	rows, err := scheduler.RunBench(ctx, o)
	scheduler.PrintBench(os.Stdout, o, rows)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"options": o, "rows": rows}, "", "  ")
		if werr := os.WriteFile(*jsonOut, b, 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
