package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// demoFlags are `demo`'s flags: the cluster demo's (up's, and the pods under measurement)
// and, with --store-only, the store-only demo's.
type demoFlags struct {
	up         upFlags
	deployment bool
	qps        float64
	keep       bool
	out        string
	storeOnly  bool
	storeBin   string
	target     string
	duration   time.Duration
	quiet      bool
	compare    bool
	drainPods  int
	storeData  string // set by the comparison: the tmpfs directory of both stacks' store data
}

func newDemoCmd() *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "meganode (meganode-store + meganode scheduler) and the stock stack (etcd + kube-scheduler) under the same load, one table of both (--store-only: the store alone)",
		Long: `demo shows what meganode gains. It runs 'meganode up' with the product — meganode-store
and the meganode scheduler — with --nodes KWOK nodes, creates --pods pods at --qps under
measurement (API call latency per verb, pod startup), then drains --drain-pods pods created
while the scheduler is paused (pods scheduled/s, scheduler CPU per pod), and stops the
cluster. Then it does the same with the stock stack — real etcd v3.6 and the stock
kube-scheduler — and prints one table of both stacks with the ratios (meganode/stock), and
writes it as comparison.json (with each stack's report.json and charts) to --out.

With --compare=false it runs one stack only — by default the product; --store and
--scheduler pick another — and prints its SLO report (--keep leaves it running).

With --store-only it starts one meganode-store (or etcd with --target etcd) and runs
--duration of each workload (put, lease-flood, range, watch) against it with the official
etcd Go client.`,
		Example: `  meganode demo
  meganode demo --nodes 200 --pods 400 --drain-pods 400 --out /tmp/demo
  meganode demo --compare=false --nodes 1000 --pods 2000 --shards 2
  meganode demo --compare=false --store etcd --scheduler kube-scheduler
  meganode demo --compare=false --nodes 100 --pods 200 --keep && meganode down
  meganode demo --store-only --store-bin bin/meganode-store`,
		Args: noArgs,
		RunE: action(f, func(ctx context.Context, cmd *cobra.Command, f *demoFlags) error {
			if f.storeOnly {
				return runStoreDemo(ctx, f)
			}
			return runClusterDemo(ctx, cmd, f)
		}),
	}
	f.up.register(cmd)
	fs := cmd.Flags()
	setDefaults(fs, map[string]string{"nodes": "1000", "pods": "1000", "scheduler": cluster.SchedulerMeganode})
	fs.BoolVar(&f.compare, "compare", true, "run the stock stack (etcd v3.6 + kube-scheduler) after meganode's under the same load and print both with the ratios")
	fs.IntVar(&f.drainPods, "drain-pods", 1000, "pods created with the scheduler paused, then drained: pods scheduled/s and scheduler CPU per pod (0: skip)")
	fs.BoolVar(&f.deployment, "deployment", false, "create the pods through a Deployment")
	fs.Float64Var(&f.qps, "qps", 50, "pod creates per second (the SLO is measured below saturation; 0 = unthrottled)")
	fs.BoolVar(&f.keep, "keep", false, "leave the cluster running (stop it with 'meganode down')")
	fs.StringVar(&f.out, "out", "", "directory for comparison.json, report.json and charts (default <state-dir>/report)")
	fs.BoolVar(&f.storeOnly, "store-only", false, "run the store-only demo instead: one store, a few seconds of each workload")
	fs.StringVar(&f.storeBin, "store-bin", "", "--store-only: meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	fs.StringVar(&f.target, "target", bench.TargetMeganode, "--store-only: meganode, or etcd to show the reference doing the same")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "--store-only: length of each step")
	fs.BoolVar(&f.quiet, "quiet", false, "--store-only: no progress output")
	completeValues(cmd, "target", bench.TargetMeganode, bench.TargetEtcd)
	return cmd
}

func (f *demoFlags) validate() error {
	if f.storeOnly {
		return oneOf("target", f.target, bench.TargetMeganode, bench.TargetEtcd)
	}
	if f.drainPods < 0 {
		return usagef("--drain-pods must be ≥ 0")
	}
	if f.compare {
		// The comparison picks both stacks itself; --store and --scheduler name the one stack of --compare=false.
		if f.up.store != cluster.StoreMeganode || f.up.sched.scheduler != cluster.SchedulerMeganode {
			return usagef("--store and --scheduler pick the stack of --compare=false; the comparison runs meganode and the stock stack itself")
		}
		if f.keep {
			return usagef("--keep needs --compare=false (the comparison stops each stack before the next)")
		}
		if f.up.record != "" {
			return usagef("--record needs --compare=false (the proxy would sit under one stack only)")
		}
	}
	return f.up.validate()
}

// runStoreDemo starts one store and runs a few seconds of each workload against it with
// the official etcd Go client.
func runStoreDemo(ctx context.Context, f *demoFlags) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var prog *bench.Progress
	if !f.quiet {
		prog = bench.NewProgress(os.Stderr)
	}

	began := time.Now()
	prog.Phase(fmt.Sprintf("starting %s…", f.target))
	t, err := bench.TargetSpec{Kind: f.target, StoreBin: f.storeBin, EtcdCmd: []string{self, "etcd"}}.Start()
	if err != nil {
		return err
	}
	defer t.Close()
	prog.Printf("%s serving on %s (pid %d, data in %s)", f.target, t.Endpoints[0], t.Pid, t.DataDir)

	steps := []struct {
		workload, what string
		cfg            bench.Config
	}{
		{"put", "100 clients on 10 connections writing 1 KiB values to 10,000 keys",
			bench.Config{Clients: 100, Conns: 10, KeySize: 48, ValSize: 1024, KeySpaceSize: 10000}},
		{"lease-flood", "500 kubelets renewing 5,000 node Leases with kube-apiserver's update Txn",
			bench.Config{Clients: 500, Conns: 10, Leases: 5000}},
		{"range", "paginated LISTs (500 per page) of 5,000 pods, at the latest and an old revision",
			bench.Config{Clients: 2, Conns: 2, Keys: 5000, KeySize: 32, ValSize: 1024}},
		{"watch", "5 apiserver-style watchers on a prefix while 20 writers write",
			bench.Config{Clients: 20, Conns: 5, Watchers: 5, KeySize: 16, ValSize: 512, KeySpaceSize: 1000}},
	}
	var results []*bench.Result
	for _, s := range steps {
		cfg := s.cfg
		cfg.Duration = f.duration
		cfg.Progress = prog
		prog.Printf("%s: %s", s.workload, s.what)
		wl, err := bench.New(s.workload, cfg)
		if err != nil {
			return err
		}
		res, err := bench.Execute(ctx, wl, t, cfg, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", s.workload, err)
		}
		results = append(results, res)
	}

	fmt.Printf("\n%s on %s, each step %s, official etcd Go client (go.etcd.io/etcd/client/v3):\n\n", f.target, t.Endpoints[0], f.duration)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tops\tops/s\tp50\tp99\tserver CPU µs/op\tserver peak RSS\terrors\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.1f\t%s\t%d\t\n", r.Workload, r.Ops, bench.HumanRate(r.OpsPerSec),
			bench.FmtUs(r.Latency.P50Us), bench.FmtUs(r.Latency.P99Us), r.ServerCPUPerOpUs,
			bench.FmtBytes(float64(r.Server.PeakRSS)), r.Errors)
	}
	tw.Flush()
	for _, r := range results {
		switch r.Workload {
		case "lease-flood":
			fmt.Printf("\nlease-flood: each value is a coordination.k8s.io/v1 Lease in kube-apiserver's protobuf encoding (%.0f bytes); %.0f conflicts.\n",
				r.Extra["lease_value_bytes"], r.Extra["conflicts"])
		case "range":
			fmt.Printf("range: %.0f full lists at the latest revision (p50 %s), %.0f at revision %.0f (p50 %s).\n",
				r.Extra["lists_latest"], bench.FmtUs(r.Extra["list_latest_p50_us"]), r.Extra["lists_old"],
				r.Extra["old_revision"], bench.FmtUs(r.Extra["list_old_p50_us"]))
		case "watch":
			fmt.Printf("watch: %.0f events delivered (%s/s), write→event p50 %s p99 %s, %.0f missing.\n",
				r.Extra["events"], bench.HumanRate(r.Extra["events_per_sec"]), bench.FmtUs(r.Extra["delay_p50_us"]),
				bench.FmtUs(r.Extra["delay_p99_us"]), r.Extra["events_missing"])
		}
	}
	fmt.Printf("\ndone in %.1fs. For the side-by-side comparison with etcd: meganode bench put --target both (or make bench).\n",
		time.Since(began).Seconds())
	return nil
}
