package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/shard"
)

// schedulerFlags are `meganode scheduler`'s flags: one process of the scheduler, all roles
// in it (--role all) or one role of a distributed deployment (deploy/scheduler/).
type schedulerFlags struct {
	kubeconfig, role                             string
	shards, collectors, fanout                   int
	name                                         string
	fraction                                     float64
	deadline                                     time.Duration
	inflight, bindWorkers                        int
	eqTTL                                        time.Duration
	parallelism, queue                           int
	deadAfter                                    time.Duration
	qps                                          float64
	feasible, globalView, health, listen         string
	index                                        int
	children, colAddrs, shardAddrs, root, intake string
	whAddr, whCert, whKey, whCA                  string
	reconcile                                    time.Duration
	scatter                                      string
	batch, parallelPods                          int
}

func newSchedulerCmd() *cobra.Command {
	f := &schedulerFlags{}
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "run the meganode scheduler (sharded scatter/gather on the kube-scheduler framework); bench, simulate and million measure it",
		Long: `scheduler runs the meganode scheduler: nodes are split over --shards shards, each running
the kube-scheduler framework with the default plugins on its own nodes; a collector takes
unscheduled pods (a watch, or an admission webhook with --intake webhook), scatters each
to --scatter shards (through a relay tree of --fanout for all), gathers their proposals and
binds the best. With --role all (the default) every part runs in this process and a dead
shard's nodes are taken over; --role shard|relay|collector runs one part of a distributed
deployment (deploy/scheduler/). 'meganode up --scheduler meganode' runs it for you.

'scheduler bench' measures it against kube-scheduler on 'up' clusters; 'scheduler simulate'
measures its per-pod costs here and projects 1M pods on 1M nodes; 'scheduler million' runs it
whole in this process over N in-process nodes and M pods and measures it.`,
		Example: `  meganode scheduler --kubeconfig ~/.kube/config --shards 4 --healthz 127.0.0.1:10259
  meganode scheduler --role shard --index 0 --shards 4 --listen 127.0.0.1:7000 --collector-addrs 127.0.0.1:7100
  meganode scheduler --intake webhook --webhook-addr 127.0.0.1:9443 --kubeconfig kc.yaml
  meganode scheduler bench --nodes 1000 --pods 2000 --shards 1,2,4
  meganode scheduler simulate --nodes 1000 --pods 2000 --shards 4
  meganode scheduler million --nodes 100000 --pods 100000 --workload mixed`,
		Args: subcommandArgs,
		RunE: action(f, runScheduler),
	}
	f.register(cmd)
	cmd.AddCommand(newSchedulerBenchCmd(), newSchedulerSimulateCmd(), newSchedulerMillionCmd())
	return cmd
}

func (f *schedulerFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	fs.StringVar(&f.role, "role", "all", "all (everything in this process) | shard | relay | collector")
	fs.IntVar(&f.shards, "shards", 1, "number of shards")
	fs.IntVar(&f.collectors, "collectors", 1, "number of collectors (each with its own intake of the pods hashing to it)")
	fs.IntVar(&f.fanout, "fanout", 10, "relay tree fanout")
	fs.StringVar(&f.name, "scheduler-name", podspec.DefaultSchedulerName, "spec.schedulerName(s) to serve, comma-separated (the first names the framework profile)")
	fs.Float64Var(&f.fraction, "fraction", 1, "decide once this fraction of shards answered (stragglers: see --deadline)")
	fs.DurationVar(&f.deadline, "deadline", 250*time.Millisecond, "decide this long after the first answer even if shards are missing")
	fs.IntVar(&f.inflight, "inflight", 64, "per collector: pod attempts between scatter and decision (keeps shards in step)")
	fs.IntVar(&f.bindWorkers, "bind-workers", 256, "per shard: binds (and evictions) in flight to the apiserver at once")
	fs.DurationVar(&f.eqTTL, "equivalence-ttl", 2*time.Second, "reuse filter results of identical pods for this long (0: off)")
	fs.IntVar(&f.parallelism, "parallelism", 16, "framework parallelism per shard")
	fs.IntVar(&f.queue, "queue", 1024, "bounded queue length per hop (back-pressure)")
	fs.DurationVar(&f.deadAfter, "dead-after", 3*time.Second, "role all: a shard silent this long is declared dead and its nodes taken over")
	fs.Float64Var(&f.qps, "kube-api-qps", 5000, "client QPS (binds)")
	fs.StringVar(&f.feasible, "feasible-to-find", "auto", "per shard: stop filtering after this many feasible nodes: auto (kube-scheduler's adaptive percentageOfNodesToScore over the shard's own nodes: 1 shard samples as stock does, more shards examine more), all, or a count")
	fs.StringVar(&f.globalView, "global-view", "auto", "auto: pods with pod (anti-)affinity or topology spread are evaluated on a per-shard view of all nodes and pods (O(N) memory per shard) and serialised per constraint group | off: every pod sees only its shard's nodes")
	fs.StringVar(&f.health, "healthz", "", "127.0.0.1:port for /healthz and /metrics")
	fs.StringVar(&f.listen, "listen", "", "roles shard/relay/collector: 127.0.0.1:port to serve gRPC on")
	fs.IntVar(&f.index, "index", 0, "roles shard/collector: this process's shard or collector index")
	fs.StringVar(&f.children, "children", "", "role relay: comma-separated child addresses")
	fs.StringVar(&f.colAddrs, "collector-addrs", "", "role shard (and role collector with --intake webhook, to forward pods to their collector): comma-separated collector addresses, by index")
	fs.StringVar(&f.shardAddrs, "shard-addrs", "", "role collector: comma-separated shard addresses, by index")
	fs.StringVar(&f.root, "root", "", "role collector: address of the root relay")
	fs.StringVar(&f.intake, "intake", intake.ModeWatch, "how pods come in: watch (a field-selected watch on unscheduled pods) or webhook (a validating admission webhook sees each pod at creation, plus a periodic LIST); roles all and collector")
	fs.StringVar(&f.whAddr, "webhook-addr", "127.0.0.1:9443", "--intake webhook: where the HTTPS admission webhook listens (path "+intake.WebhookPath+")")
	fs.StringVar(&f.whCert, "webhook-cert", "", "--intake webhook: serving certificate (PEM); without it and --webhook-key, a CA and a certificate are generated")
	fs.StringVar(&f.whKey, "webhook-key", "", "--intake webhook: serving key (PEM)")
	fs.StringVar(&f.whCA, "webhook-ca-file", "", "--intake webhook with a generated certificate: write the CA bundle (the webhook configuration's caBundle) here (default: a new temporary directory)")
	fs.DurationVar(&f.reconcile, "reconcile-every", 10*time.Second, "--intake webhook: LIST unscheduled pods this often (the pods the webhook missed, and the ones gone)")
	fs.StringVar(&f.scatter, "scatter", strconv.Itoa(scheduler.DefaultScatter), "shards each pod is sent to: N (power of N choices; widened to every shard when none of the N has room; pods with inter-pod constraints go to every shard) or all (every shard, through the relay tree)")
	fs.IntVar(&f.batch, "batch", scheduler.DefaultBatch, "at most this many pods of one equivalence class placed from one Filter+Score pass (1: off)")
	fs.IntVar(&f.parallelPods, "parallel-pods", 0, "pods a shard evaluates at once (0: role all: cores / shards; role shard: every core)")
	completeValues(cmd, "role", "all", "shard", "relay", "collector")
	completeValues(cmd, "intake", intake.ModeWatch, intake.ModeWebhook)
	completeValues(cmd, "global-view", "auto", "off")
}

func (f *schedulerFlags) validate() error {
	if err := oneOf("role", f.role, "all", "shard", "relay", "collector"); err != nil {
		return err
	}
	_, err := f.config()
	return err
}

// config is the scheduler's configuration from the flags.
func (f *schedulerFlags) config() (scheduler.Config, error) {
	scatterN, err := collector.ParseScatter(f.scatter)
	if err != nil {
		return scheduler.Config{}, usageError{msg: err.Error()}
	}
	batchN := f.batch
	if batchN <= 1 {
		batchN = -1
	}
	eq := f.eqTTL
	if eq == 0 {
		eq = -1
	}
	ftf, err := shard.ParseFeasibleToFind(f.feasible)
	if err != nil {
		return scheduler.Config{}, usageError{msg: err.Error()}
	}
	return scheduler.Config{Kubeconfig: f.kubeconfig, SchedulerName: f.name, Shards: f.shards, Collectors: f.collectors, Fanout: f.fanout,
		Fraction: f.fraction, Deadline: f.deadline, EquivalenceTTL: eq, Parallelism: f.parallelism, QueueLen: f.queue,
		DeadAfter: f.deadAfter, HealthAddr: f.health, QPS: float32(f.qps), FeasibleToFind: ftf, InFlight: f.inflight, BindWorkers: f.bindWorkers,
		Intake: f.intake, Webhook: intake.WebhookOptions{Addr: f.whAddr, CertFile: f.whCert, KeyFile: f.whKey, CAFile: f.whCA, ReconcileEvery: f.reconcile},
		GlobalView: f.globalView, Scatter: scatterN, Batch: batchN, ParallelPods: f.parallelPods}, nil
}

func runScheduler(ctx context.Context, cmd *cobra.Command, f *schedulerFlags) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if f.role != "all" {
		return scheduler.RunRole(ctx, f.role, cfg, scheduler.RoleConfig{Index: f.index, Listen: f.listen,
			Children: scheduler.SplitAddrs(f.children), Collectors: scheduler.SplitAddrs(f.colAddrs),
			ShardAddrs: scheduler.SplitAddrs(f.shardAddrs), Root: f.root})
	}
	if f.kubeconfig == "" {
		return usagef("--kubeconfig (or $KUBECONFIG) is required")
	}
	sys, err := scheduler.StartAll(ctx, cfg)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "meganode scheduler: %d shard(s), %d relay(s) (fanout %d), %d collector(s), serving spec.schedulerName=%s, intake %s\n",
		len(sys.Shards), sys.Relays, f.fanout, len(sys.Collectors), f.name, f.intake)
	for _, sh := range sys.Shards {
		fmt.Fprintf(stderr, "  shard %d: %d nodes\n", sh.Index(), sh.NodeCount())
	}
	<-ctx.Done()
	return nil
}

// schedulerUpFlags are `up`'s scheduler flags (also `demo`'s, which shares upFlags).
type schedulerUpFlags struct {
	scheduler string
	shards    int
	intake    string
	args      []string
}

func (f *schedulerUpFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.scheduler, "scheduler", cluster.SchedulerKube, "scheduler to run: kube-scheduler (stock) or meganode (sharded; serves spec.schedulerName=meganode)")
	fs.IntVar(&f.shards, "shards", 1, "with --scheduler meganode: scheduler shards")
	fs.StringVar(&f.intake, "intake", cluster.IntakeWatch, "with --scheduler meganode: watch (the scheduler watches unscheduled pods) or webhook (it serves a validating admission webhook on 127.0.0.1, registered by up with failurePolicy Ignore)")
	fs.StringArrayVar(&f.args, "scheduler-arg", nil, "extra 'meganode scheduler' flag (repeatable), e.g. --scheduler-arg=--fraction=0.9")
}

func (f *schedulerUpFlags) validate() error {
	if err := oneOf("scheduler", f.scheduler, cluster.SchedulerKube, cluster.SchedulerMeganode); err != nil {
		return err
	}
	if err := oneOf("intake", f.intake, cluster.IntakeWatch, cluster.IntakeWebhook); err != nil {
		return err
	}
	if f.intake == cluster.IntakeWebhook && f.scheduler != cluster.SchedulerMeganode {
		return usagef("--intake %s needs --scheduler %s", cluster.IntakeWebhook, cluster.SchedulerMeganode)
	}
	if f.shards < 1 {
		return usagef("--shards must be ≥ 1")
	}
	return nil
}

func (f *schedulerUpFlags) kind() string       { return f.scheduler }
func (f *schedulerUpFlags) shardCount() int    { return f.shards }
func (f *schedulerUpFlags) intakeMode() string { return f.intake }
func (f *schedulerUpFlags) extra() []string    { return f.args }
