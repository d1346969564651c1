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

type reportFlags struct {
	duration time.Duration
	out      string
	stateDir string
}

func newReportCmd() *cobra.Command {
	f := &reportFlags{}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "measure the 'up' cluster for a while (leases renewing) and print the SLO report",
		Long: `report measures the cluster 'meganode up' started for --duration without creating anything
(the nodes' leases renewing, the controllers' own traffic) and prints the SLO report, with
report.json and charts in --out.`,
		Example: `  meganode report
  meganode report --duration 2m --out /tmp/idle-report`,
		Args: noArgs,
		RunE: action(f, runReport),
	}
	fs := cmd.Flags()
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "measured window")
	fs.StringVar(&f.out, "out", "", "directory for report.json and charts (default <state-dir>/report)")
	stateDirFlag(fs, &f.stateDir)
	return cmd
}

func runReport(ctx context.Context, cmd *cobra.Command, f *reportFlags) error {
	st, err := loadCluster(f.stateDir)
	if err != nil {
		return err
	}
	rec, err := cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return err
	}
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	prog.Start(fmt.Sprintf("measuring %s", f.duration), 0, f.duration, func() int64 { return int64(time.Since(began).Seconds()) })
	select {
	case <-ctx.Done():
	case <-time.After(f.duration):
	}
	prog.Done()
	rep, err := rec.Stop(context.WithoutCancel(ctx), nil)
	if err != nil {
		return err
	}
	dir := f.out
	if dir == "" {
		dir = st.Dir + "/report"
	}
	printReport(rep, dir)
	return nil
}
