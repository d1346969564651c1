package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// maxKubelets bounds --kubelets: each hollow kubelet is a process of tens of MiB and one port
// below the ephemeral range.
const maxKubelets = 10000

// upFlags are `up`'s flags (also `demo`'s).
type upFlags struct {
	store     string
	shards    int
	replicas  int
	nodes     int
	kubelets  int
	probes    bool
	pods      int
	stateDir  string
	storeArgs []string
	apiArgs   []string
	record    string
	storeTLS  bool
	nodeLease int
	sched     schedulerUpFlags // --scheduler, --shards, --intake, --scheduler-arg (scheduler.go)
}

func (f *upFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.store, "store", cluster.StoreMeganode, "store under kube-apiserver: meganode or etcd (real etcd v3.6, for comparison)")
	fs.IntVar(&f.replicas, "store-replicas", 1, "members of each store's replicated group (3 tolerates one member's loss; etcd's cluster flags, kube-apiserver gets every member)")
	fs.IntVar(&f.shards, "store-shards", 0, "stores to split resources over (1 = one store; 2–4 add leases, events, pods with --etcd-servers-overrides); 0 = as the sizing plan says")
	fs.IntVar(&f.nodes, "nodes", 0, "KWOK nodes to create once the control plane is up")
	fs.IntVar(&f.kubelets, "kubelets", 0, "hollow kubelets to start beside the KWOK nodes: the kubelet's own code over a fake container runtime (bin/kubemark), one process and one port each")
	fs.BoolVar(&f.probes, "kubelet-probes", false, "run the hollow kubelets' real prober (off: upstream kubemark's fake prober)")
	fs.IntVar(&f.pods, "pods", 0, "pods the cluster is sized for (sizing plan only)")
	fs.StringVar(&f.stateDir, "state-dir", cluster.DefaultStateDir(), "where pids, certificates, kubeconfig, logs and store data go")
	fs.StringArrayVar(&f.storeArgs, "store-arg", nil, "extra flag for every store process (repeatable), e.g. --store-arg=--durability=fsync")
	fs.StringArrayVar(&f.apiArgs, "apiserver-arg", nil, "extra kube-apiserver flag (repeatable)")
	fs.BoolVar(&f.storeTLS, "store-tls", false, "mutual TLS between kube-apiserver and the stores (https, client certificates of the cluster CA), as kubeadm runs etcd")
	fs.IntVar(&f.nodeLease, "node-lease-seconds", cluster.NodeLeaseDurationSeconds, "KWOK node lease duration (renewed every quarter of it); longer cuts lease writes when benchmarking other things at large node counts")
	f.sched.register(fs)
	fs.StringVar(&f.record, "record", "", "put 'meganode etcd-proxy' between kube-apiserver and the (default) store and record its traffic to this `file` as JSON lines")
	completeValues(cmd, "store", cluster.StoreMeganode, cluster.StoreEtcd)
	completeValues(cmd, "scheduler", cluster.SchedulerKube, cluster.SchedulerMeganode)
	completeValues(cmd, "intake", cluster.IntakeWatch, cluster.IntakeWebhook)
}

func (f *upFlags) validate() error {
	if err := oneOf("store", f.store, cluster.StoreMeganode, cluster.StoreEtcd); err != nil {
		return err
	}
	if f.nodes < 0 || f.pods < 0 || f.shards < 0 {
		return usagef("--nodes, --pods and --store-shards must be ≥ 0")
	}
	if f.kubelets < 0 || f.kubelets > maxKubelets {
		return usagef("--kubelets must be between 0 and %d, got %d", maxKubelets, f.kubelets)
	}
	if f.replicas < 1 {
		return usagef("--store-replicas must be ≥ 1")
	}
	return f.sched.validate()
}

func (f *upFlags) options(prog *bench.Progress) cluster.UpOptions {
	o := cluster.UpOptions{StateDir: f.stateDir, Store: f.store, StoreShards: f.shards, StoreReplicas: f.replicas, Nodes: f.nodes, Kubelets: f.kubelets, KubeletProbes: f.probes, Pods: f.pods,
		StoreArgs: f.storeArgs, StoreTLS: f.storeTLS, APIServerArgs: f.apiArgs, Record: f.record, NodeLeaseSeconds: f.nodeLease, Progress: prog}.WithScheduler(f.sched.kind(), f.sched.shardCount(), f.sched.extra())
	o.SchedulerIntake = f.sched.intakeMode()
	return o
}

func newUpCmd() *cobra.Command {
	f := &upFlags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "start a local Kubernetes control plane (kube-apiserver, controller-manager, scheduler, KWOK) on meganode-store or etcd",
		Long: `up starts a Kubernetes control plane on this machine and leaves it running: the store
(meganode-store, or real etcd v3.6 with --store etcd; split over --store-shards stores),
kube-apiserver, kube-controller-manager, a scheduler (the stock kube-scheduler, or the
sharded meganode scheduler with --scheduler meganode) and KWOK with --nodes fake nodes;
--kubelets adds hollow kubelets beside them (the kubelet's own code over a fake runtime,
one process each: they register their nodes and run pods through the kubelet's status path).
Everything listens on 127.0.0.1. Pids, certificates, the kubeconfig, logs and store data
go to --state-dir; 'meganode down' stops exactly these processes.`,
		Example: `  meganode up --nodes 100
  meganode up --nodes 10000 --pods 20000 --scheduler meganode --shards 4
  meganode up --store etcd --nodes 1000
  meganode up --nodes 100 --record /tmp/apiserver.jsonl
  meganode up --nodes 100 --store-tls
  meganode up --nodes 0 --kubelets 5
  meganode up --nodes 1000 --kubelets 100
  meganode up --nodes 100 --store-arg=--durability=fsync --state-dir /var/tmp/mc`,
		Args: noArgs,
		RunE: action(f, runUp),
	}
	f.register(cmd)
	return cmd
}

func runUp(ctx context.Context, cmd *cobra.Command, f *upFlags) error {
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	st, err := cluster.Up(ctx, f.options(prog))
	if err != nil {
		return err
	}
	prog.Printf("cluster up in %.1fs: store %s (%d shard(s)), %d KWOK nodes, %d hollow kubelets\n  export KUBECONFIG=%s\n  state, logs and data in %s; stop with `meganode down --state-dir %s`",
		time.Since(began).Seconds(), st.Store, len(st.Shards), st.Nodes, st.Kubelets, st.Kubeconfig, st.Dir, st.Dir)
	return nil
}

// stateDirFlag registers --state-dir for the commands that work on the `up` cluster.
func stateDirFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
}
