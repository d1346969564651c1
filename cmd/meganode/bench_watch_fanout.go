package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchFanoutFlags struct {
	out, storeBin                   string
	watchers, rate, rounds, valSize int
	duration                        time.Duration
	storeLog                        bool
}

// newBenchWatchFanoutCmd: watchers all on the leader or spread over a 3-member group, the
// leader's CPU per committed write compared (issue 36's watch fan-out target).
func newBenchWatchFanoutCmd() *cobra.Command {
	f := &benchFanoutFlags{}
	cmd := &cobra.Command{
		Use:   "watch-fanout",
		Short: "the leader's CPU per write with W watchers all on it vs spread over a 3-member meganode-store group",
		Long: `watch-fanout starts, for every run, a fresh 3-member meganode-store group, opens --watchers
watch streams on /registry/pods/ (one connection each, as each kube-apiserver's watch cache has
its own) either all on the leader or spread evenly over the three members, then puts --rate
values per second through the leader for --duration. It reports the leader's CPU (user+system)
per committed write, the followers' too, and checks that every watcher got every write once, in
revision order, with no gap. A third placement puts only the leader's share of the spread one
(every third watcher) on the leader and none on the followers: what the leader pays when the
followers' watchers are served on hosts of their own, since here the followers' fan-out shares
the leader's two cores. Rounds rotate the order of the placements. Writes runs.json,
medians.json and summary.txt to --out.`,
		Example: `  meganode bench watch-fanout --watchers 300 --rate 200 --duration 20s --rounds 3 --out docs/bench/watch-fanout`,
		Args:    noArgs,
		RunE:    action(f, runBenchWatchFanout),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.watchers, "watchers", 300, "watch streams on the pods prefix")
	fs.IntVar(&f.rate, "rate", 200, "puts per second through the leader")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "write window per run")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each runs the three placements, order rotated")
	fs.IntVar(&f.valSize, "val-size", 1024, "value size")
	fs.StringVar(&f.storeBin, "store-bin", "bin/meganode-store", "meganode-store binary")
	fs.BoolVar(&f.storeLog, "store-log", false, "pass the members' logs to stderr")
	fs.StringVar(&f.out, "out", "", "directory for runs.json, medians.json and summary.txt (default: print only)")
	return cmd
}

func (f *benchFanoutFlags) validate() error {
	if f.watchers < 3 || f.rate < 1 || f.rounds < 1 || f.valSize < 1 || f.duration <= 0 {
		return usagef("--watchers ≥ 3, --rate, --rounds, --val-size ≥ 1 and --duration > 0")
	}
	return nil
}

func runBenchWatchFanout(ctx context.Context, cmd *cobra.Command, f *benchFanoutFlags) error {
	storeLog, err := useStoreBin(cmd, f.storeBin, f.storeLog)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	runs, err := bench.RunFanout(ctx, bench.FanoutSpec{Watchers: f.watchers, Rate: f.rate, Duration: f.duration, Rounds: f.rounds, ValSize: f.valSize,
		Log: cmd.ErrOrStderr(), StoreLog: storeLog}, func(r *bench.FanoutRun) {
		fmt.Fprintf(w, "round %d %-18s watchers per member %v: %d writes in %.1f s; leader %.1f µs CPU per write, followers %.1f / %.1f; every watcher got every write once, in order: %v\n",
			r.Round, r.Placement, r.PerMember, r.Writes, r.Seconds, r.LeaderCPUPerWriteUs, r.FollowersCPUPerWriteUs[0], r.FollowersCPUPerWriteUs[1], r.Violations == 0)
	})
	if err != nil {
		return err
	}
	meds := bench.FanoutMedians(runs)
	summary := ""
	if len(meds) == 3 {
		all, spread, alone := meds[0], meds[1], meds[2]
		summary = fmt.Sprintf("%d watchers, %d puts/s of %d B, %v per run, medians of %d runs: leader CPU per write %.1f µs with every watcher on it, %.1f µs spread over 3 members (%.2f× less); %.1f µs with only the leader's third on it and none on the followers (%.2f× less: the followers' fan-out off this machine's two cores); watchers missing, reordering or repeating an event: %d / %d / %d\n",
			f.watchers, f.rate, f.valSize, f.duration, all.Runs, all.LeaderCPUPerWriteUs, spread.LeaderCPUPerWriteUs,
			all.LeaderCPUPerWriteUs/spread.LeaderCPUPerWriteUs, alone.LeaderCPUPerWriteUs, all.LeaderCPUPerWriteUs/alone.LeaderCPUPerWriteUs,
			all.Violations, spread.Violations, alone.Violations)
	}
	fmt.Fprint(w, summary)
	return writeBenchOut(f.out, map[string]any{"runs.json": runs, "medians.json": meds}, summary)
}
