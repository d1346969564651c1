package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/shard"
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
	name := fs.String("scheduler-name", podspec.DefaultSchedulerName, "spec.schedulerName(s) to serve, comma-separated (the first names the framework profile)")
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
	intakeMode := fs.String("intake", intake.ModeWatch, "how pods come in: watch (a field-selected watch on unscheduled pods) or webhook (a validating admission webhook sees each pod at creation, plus a periodic LIST); roles all and collector")
	whAddr := fs.String("webhook-addr", "127.0.0.1:9443", "--intake webhook: where the HTTPS admission webhook listens (path "+intake.WebhookPath+")")
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
	scatterN, err := collector.ParseScatter(*scatter)
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
	ftf, err := shard.ParseFeasibleToFind(*feasibleRun)
	if err != nil {
		return err
	}
	cfg := scheduler.Config{Kubeconfig: *kubeconfig, SchedulerName: *name, Shards: *shards, Collectors: *collectors, Fanout: *fanout,
		Fraction: *fraction, Deadline: *deadline, EquivalenceTTL: eq, Parallelism: *parallelism, QueueLen: *queue,
		DeadAfter: *deadAfter, HealthAddr: *health, QPS: float32(*qps), FeasibleToFind: ftf, InFlight: *inflight, BindWorkers: *bindWorkers,
		Intake: *intakeMode, Webhook: intake.WebhookOptions{Addr: *whAddr, CertFile: *whCert, KeyFile: *whKey, CAFile: *whCA, ReconcileEvery: *reconcile},
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
		len(sys.Shards), sys.Relays, *fanout, len(sys.Collectors), *name, *intakeMode)
	for _, sh := range sys.Shards {
		fmt.Fprintf(os.Stderr, "  shard %d: %d nodes\n", sh.Index(), sh.NodeCount())
	}
	<-ctx.Done()
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
