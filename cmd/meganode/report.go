package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

func init() {
	register("report", "measure the `up` cluster for a while (leases renewing) and print the SLO report", runReport)
}

// measurePods creates pods inside a measured window and returns the report.
func measurePods(ctx context.Context, st *cluster.State, o cluster.PodOptions) (*cluster.Report, error) {
	cs, err := cluster.Clientset(st)
	if err != nil {
		return nil, err
	}
	rec, err := cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return nil, err
	}
	run, perr := cluster.CreatePods(ctx, cs, o)
	rep, err := rec.Stop(context.WithoutCancel(ctx), run)
	if err != nil {
		return nil, err
	}
	return rep, perr
}

func printReport(rep *cluster.Report, dir string) {
	rep.Print(os.Stdout, 14)
	files, err := rep.WriteFiles(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writing report:", err)
	}
	for _, f := range files {
		fmt.Fprintln(os.Stdout, "wrote", f)
	}
}

func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	dur := fs.Duration("duration", 30*time.Second, "measured window")
	out := fs.String("out", "", "directory for report.json and charts (default <state-dir>/report)")
	stateDir := fs.String("state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	st, err := loadCluster(*stateDir)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	rec, err := cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return err
	}
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	prog.Start(fmt.Sprintf("measuring %s", *dur), 0, *dur, func() int64 { return int64(time.Since(began).Seconds()) })
	select {
	case <-ctx.Done():
	case <-time.After(*dur):
	}
	prog.Done()
	rep, err := rec.Stop(context.WithoutCancel(ctx), nil)
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = st.Dir + "/report"
	}
	printReport(rep, dir)
	return nil
}
