package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

func init() {
	register("up", "start a local Kubernetes control plane (kube-apiserver, controller-manager, scheduler, KWOK) on meganode-store or etcd", runUp)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseUpFlags(fs *flag.FlagSet, args []string) (bool, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return true, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

type upFlags struct {
	store     *string
	shards    *int
	nodes     *int
	pods      *int
	stateDir  *string
	storeArgs stringList
	apiArgs   stringList
	record    *string
	nodeLease *int
	sched     *schedulerUpFlags // --scheduler, --shards, --scheduler-arg (scheduler.go)
}

func addUpFlags(fs *flag.FlagSet, nodes, pods int) *upFlags {
	f := &upFlags{
		store:    fs.String("store", cluster.StoreMeganode, "store under kube-apiserver: meganode or etcd (real etcd v3.6, for comparison)"),
		shards:   fs.Int("store-shards", 0, "stores to split resources over (1 = one store; 2–4 add leases, events, pods with --etcd-servers-overrides); 0 = as the sizing plan says"),
		nodes:    fs.Int("nodes", nodes, "KWOK nodes to create once the control plane is up"),
		pods:     fs.Int("pods", pods, "pods the cluster is sized for (sizing plan only)"),
		stateDir: fs.String("state-dir", cluster.DefaultStateDir(), "where pids, certificates, kubeconfig, logs and store data go"),
	}
	fs.Var(&f.storeArgs, "store-arg", "extra flag for every store process (repeatable), e.g. --store-arg=--durability=fsync")
	fs.Var(&f.apiArgs, "apiserver-arg", "extra kube-apiserver flag (repeatable)")
	f.nodeLease = fs.Int("node-lease-seconds", cluster.NodeLeaseDurationSeconds, "KWOK node lease duration (renewed every quarter of it); longer cuts lease writes when benchmarking other things at large node counts")
	f.sched = addSchedulerUpFlags(fs)
	f.record = fs.String("record", "", "put `meganode etcd-proxy` between kube-apiserver and the (default) store and record its traffic to this file as JSON lines")
	return f
}

func (f *upFlags) options(prog *bench.Progress) cluster.UpOptions {
	o := cluster.UpOptions{StateDir: *f.stateDir, Store: *f.store, StoreShards: *f.shards, Nodes: *f.nodes, Pods: *f.pods,
		StoreArgs: f.storeArgs, APIServerArgs: f.apiArgs, Record: *f.record, NodeLeaseSeconds: *f.nodeLease, Progress: prog}.WithScheduler(f.sched.kind(), f.sched.shardCount(), f.sched.extra())
	o.SchedulerIntake = f.sched.intakeMode()
	return o
}

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	f := addUpFlags(fs, 0, 0)
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	st, err := cluster.Up(ctx, f.options(prog))
	if err != nil {
		return err
	}
	prog.Printf("cluster up in %.1fs: store %s (%d shard(s)), %d nodes\n  export KUBECONFIG=%s\n  state, logs and data in %s; stop with `meganode down --state-dir %s`",
		time.Since(began).Seconds(), st.Store, len(st.Shards), st.Nodes, st.Kubeconfig, st.Dir, st.Dir)
	return nil
}
