package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

func init() {
	register("create-pods", "create pods (or a Deployment) on the `up` cluster and report the SLOs", runCreatePods)
	register("delete-pods", "delete the pods and Deployments create-pods made", runDeletePods)
}

func runCreatePods(args []string) error {
	fs := flag.NewFlagSet("create-pods", flag.ContinueOnError)
	count := fs.Int("count", 100, "pods to create")
	deploy := fs.Bool("deployment", false, "create one Deployment of --count replicas (pods made by the controller-manager)")
	conc := fs.Int("concurrency", 32, "parallel creates")
	qps := fs.Float64("qps", 0, "pod creates per second (0: as fast as the apiserver takes them)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for every pod to run")
	out := fs.String("out", "", "directory for report.json and charts (default <state-dir>/report)")
	stateDir := fs.String("state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
	schedName := fs.String("scheduler-name", "", "spec.schedulerName of the pods (\"\" = default-scheduler; meganode for `up --scheduler meganode`)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	st, err := loadCluster(*stateDir)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := measurePods(ctx, st, cluster.PodOptions{Count: *count, Deployment: *deploy, Concurrency: *conc, QPS: *qps, Timeout: *timeout,
		Progress: bench.NewProgress(os.Stderr), SchedulerName: *schedName})
	if rep != nil {
		dir := *out
		if dir == "" {
			dir = st.Dir + "/report"
		}
		printReport(rep, dir)
	}
	return err
}

func runDeletePods(args []string) error {
	fs := flag.NewFlagSet("delete-pods", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the pods to go")
	stateDir := fs.String("state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	st, err := loadCluster(*stateDir)
	if err != nil {
		return err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	began := time.Now()
	n, err := cluster.DeletePods(ctx, cs, "", *timeout, bench.NewProgress(os.Stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d pods deleted in %.1fs\n", n, time.Since(began).Seconds())
	return nil
}
