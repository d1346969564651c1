package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

func init() {
	register("demo", "a Kubernetes control plane on meganode-store with KWOK nodes and pods, its SLO report, then down (--store-only: the store alone under a short load)", runDemo)
}

// runDemo runs the cluster demo (demo_cluster.go); with --store-only it starts one store and
// runs a few seconds of each workload against it with the official etcd Go client.
func runDemo(args []string) error {
	rest, storeOnly := withoutFlag(args, "--store-only")
	if !storeOnly {
		return runClusterDemo(args)
	}
	args = rest
	fs := flag.NewFlagSet("demo --store-only", flag.ContinueOnError)
	storeBin := fs.String("store-bin", "", "meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	target := fs.String("target", bench.TargetMeganode, "meganode, or etcd to show the reference doing the same")
	secs := fs.Duration("duration", 3*time.Second, "length of each step")
	quiet := fs.Bool("quiet", false, "no progress output")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *target != bench.TargetMeganode && *target != bench.TargetEtcd {
		return fmt.Errorf("--target: want meganode or etcd")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var prog *bench.Progress
	if !*quiet {
		prog = bench.NewProgress(os.Stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	began := time.Now()
	prog.Phase(fmt.Sprintf("starting %s…", *target))
	t, err := bench.TargetSpec{Kind: *target, StoreBin: *storeBin, EtcdCmd: []string{self, "etcd"}}.Start()
	if err != nil {
		return err
	}
	defer t.Close()
	prog.Printf("%s serving on %s (pid %d, data in %s)", *target, t.Endpoints[0], t.Pid, t.DataDir)

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
		cfg.Duration = *secs
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

	fmt.Printf("\n%s on %s, each step %s, official etcd Go client (go.etcd.io/etcd/client/v3):\n\n", *target, t.Endpoints[0], *secs)
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
