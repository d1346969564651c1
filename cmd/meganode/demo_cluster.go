package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// runClusterDemo runs the product's stack and, with --compare, the stock stack after it under
// the same load, and prints the comparison (demo_compare.go); with --compare=false, the one
// stack the flags name and its SLO report.
func runClusterDemo(ctx context.Context, cmd *cobra.Command, d *demoFlags) error {
	if d.compare {
		return runCompareDemo(ctx, d)
	}
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	run, st, err := runStack(ctx, d, d.up, "", prog)
	if run.Report != nil {
		dir := d.out
		if dir == "" {
			dir = filepath.Join(run.StateDir, "report")
		}
		printReport(run.Report, dir)
	}
	if run.Drain != nil {
		printDrain(run.Drain)
	}
	if err != nil {
		return err
	}
	if d.keep {
		prog.Printf("cluster left running: export KUBECONFIG=%s; meganode down --state-dir %s", st.Kubeconfig, st.Dir)
	}
	prog.Printf("demo done in %.1fs", time.Since(began).Seconds())
	return nil
}

// runStack is one stack's demo: up (store, apiserver, controller-manager, scheduler, KWOK,
// nodes), the paced pods under measurement (the SLO report's window), the drain, and down
// unless --keep. It returns what it measured even when a step failed, and that step's error.
func runStack(ctx context.Context, d *demoFlags, f upFlags, name string, prog *bench.Progress) (run cluster.StackRun, st *cluster.State, err error) {
	began := time.Now()
	run = cluster.StackRun{Name: name, Store: f.store, Scheduler: f.sched.scheduler, StateDir: f.stateDir}
	defer func() {
		run.Seconds = time.Since(began).Seconds()
		if err != nil {
			run.Error = err.Error()
		}
	}()
	prog.Printf("%s: %d KWOK nodes and %d pods on a real kube-apiserver v1.36.3 over %s with %s", stackTitle(name), f.nodes, f.pods,
		storeName(f.store), f.sched.scheduler)
	o := f.options(prog)
	o.DataDir = d.dataDir(name)
	st, err = cluster.Up(ctx, o)
	if err != nil {
		return run, st, err
	}
	if !d.keep {
		defer func() {
			prog.Phase("stopping the cluster…")
			if derr := st.Down(15*time.Second, nil); derr != nil {
				fmt.Fprintln(os.Stderr, "down:", derr)
			}
			prog.Printf("cluster stopped (%d processes); logs in %s", len(st.Components), filepath.Join(st.Dir, "logs"))
		}()
	}
	prog.Printf("control plane and %d nodes up in %.1fs", st.Nodes, time.Since(began).Seconds())
	rep, err := measurePods(ctx, st, cluster.PodOptions{Count: f.pods, Deployment: d.deployment, QPS: d.qps, Timeout: 8 * time.Minute, Progress: prog})
	run.Report = rep
	if err != nil {
		return run, st, err
	}
	if d.drainPods > 0 {
		run.Drain, err = cluster.DrainPods(ctx, st, d.drainPods, 5*time.Minute, prog)
		if err != nil {
			return run, st, err
		}
		prog.Printf("drain: %d pods bound in %.2fs = %.0f pods/s, %s CPU %.2f ms/pod", run.Drain.Bound, run.Drain.Seconds,
			run.Drain.PodsPerSec, run.Drain.Scheduler, run.Drain.CPUMsPerPod)
	}
	return run, st, nil
}

func printDrain(dr *cluster.DrainRun) {
	fmt.Printf("\ndrain: %d pods created with %s paused, all bound %.2fs after it resumed = %.0f pods/s; %s CPU %.2f ms per pod\n",
		dr.Pods, dr.Scheduler, dr.Seconds, dr.PodsPerSec, dr.Scheduler, dr.CPUMsPerPod)
}

func stackTitle(name string) string {
	if name == "" {
		return "meganode demo"
	}
	return "meganode demo, " + name + " stack"
}

func storeName(store string) string {
	if store == cluster.StoreEtcd {
		return "etcd v3.6"
	}
	return "meganode-store"
}
