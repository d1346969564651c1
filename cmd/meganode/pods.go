package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

type createPodsFlags struct {
	count       int
	deployment  bool
	concurrency int
	qps         float64
	timeout     time.Duration
	out         string
	stateDir    string
	schedName   string
}

func newCreatePodsCmd() *cobra.Command {
	f := &createPodsFlags{}
	cmd := &cobra.Command{
		Use:   "create-pods",
		Short: "create pods (or a Deployment) on the 'up' cluster and report the SLOs",
		Long: `create-pods creates --count pods (or one Deployment of --count replicas) on the cluster
'meganode up' started, waits until they run, and prints the SLO report of that window (API
call latency per verb, pod startup latency, scheduling throughput, store CPU and memory),
with report.json and charts in --out.`,
		Example: `  meganode create-pods --count 200
  meganode create-pods --count 10000 --deployment --qps 100
  meganode create-pods --count 1000 --scheduler-name meganode   # after up --scheduler meganode`,
		Args: noArgs,
		RunE: action(f, runCreatePods),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.count, "count", 100, "pods to create")
	fs.BoolVar(&f.deployment, "deployment", false, "create one Deployment of --count replicas (pods made by the controller-manager)")
	fs.IntVar(&f.concurrency, "concurrency", 32, "parallel creates")
	fs.Float64Var(&f.qps, "qps", 0, "pod creates per second (0: as fast as the apiserver takes them)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait for every pod to run")
	fs.StringVar(&f.out, "out", "", "directory for report.json and charts (default <state-dir>/report)")
	stateDirFlag(fs, &f.stateDir)
	fs.StringVar(&f.schedName, "scheduler-name", "", "spec.schedulerName of the pods (\"\" = default-scheduler; meganode for 'up --scheduler meganode')")
	return cmd
}

func runCreatePods(ctx context.Context, cmd *cobra.Command, f *createPodsFlags) error {
	st, err := loadCluster(f.stateDir)
	if err != nil {
		return err
	}
	rep, err := measurePods(ctx, st, cluster.PodOptions{Count: f.count, Deployment: f.deployment, Concurrency: f.concurrency, QPS: f.qps, Timeout: f.timeout,
		Progress: bench.NewProgress(os.Stderr), SchedulerName: f.schedName})
	if rep != nil {
		dir := f.out
		if dir == "" {
			dir = st.Dir + "/report"
		}
		printReport(rep, dir)
	}
	return err
}

type deletePodsFlags struct {
	timeout  time.Duration
	stateDir string
}

func newDeletePodsCmd() *cobra.Command {
	f := &deletePodsFlags{}
	cmd := &cobra.Command{
		Use:   "delete-pods",
		Short: "delete the pods and Deployments create-pods made",
		Long: `delete-pods deletes the pods and Deployments 'meganode create-pods' made on the 'up' cluster
and waits (up to --timeout) until they are gone.`,
		Example: `  meganode delete-pods
  meganode delete-pods --timeout 2m --state-dir /var/tmp/mc`,
		Args: noArgs,
		RunE: action(f, runDeletePods),
	}
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait for the pods to go")
	stateDirFlag(cmd.Flags(), &f.stateDir)
	return cmd
}

func runDeletePods(ctx context.Context, cmd *cobra.Command, f *deletePodsFlags) error {
	st, err := loadCluster(f.stateDir)
	if err != nil {
		return err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return err
	}
	began := time.Now()
	n, err := cluster.DeletePods(ctx, cs, "", f.timeout, bench.NewProgress(os.Stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%d pods deleted in %.1fs\n", n, time.Since(began).Seconds())
	return nil
}
