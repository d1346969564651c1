package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchCatchUpFlags struct {
	nodes, out, storeBin string
	clients              int
	storeLog             bool
}

// newBenchCatchUpCmd: a learner added to a 3-member group holding a cluster's state, timed
// until it serves (issue 36's catch-up target), at several sizes, with a model fitted on the
// smaller ones and checked against the largest.
func newBenchCatchUpCmd() *cobra.Command {
	f := &benchCatchUpFlags{}
	cmd := &cobra.Command{
		Use:   "catch-up",
		Short: "time a learner added to a 3-member meganode-store group holding N nodes, N pods and N Leases until it serves",
		Long: `catch-up starts, for each size, a fresh 3-member meganode-store group (--durability
replicated), loads 'bench state' data into it (N Nodes, N Pods, N node Leases, created as
kube-apiserver creates them, then compacted), adds a learner (MemberAdd --learner) and starts it
with --initial-cluster-state existing. It reports the time from the learner's process start to
its ready line and to serving — its raft log applied up to the leader's index at the add, and a
serializable read of the last Lease answered — and the learner's memory against the leader's
once it settles (its value packer compresses what the snapshot brought). With three or more sizes, a linear model of the serving time (fixed + per object) is
fitted on all but the largest and checked against it. Writes runs.json, model.json and
summary.txt to --out.`,
		Example: `  meganode bench catch-up --nodes 50000,100000,200000 --out docs/bench/catch-up`,
		Args:    noArgs,
		RunE:    action(f, runBenchCatchUp),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodes, "nodes", "50000,100000,200000", "sizes: objects of each kind, comma-separated")
	fs.IntVar(&f.clients, "clients", 64, "load writers")
	fs.StringVar(&f.storeBin, "store-bin", "bin/meganode-store", "meganode-store binary")
	fs.BoolVar(&f.storeLog, "store-log", false, "pass the members' logs to stderr")
	fs.StringVar(&f.out, "out", "", "directory for runs.json, model.json and summary.txt (default: print only)")
	return cmd
}

func (f *benchCatchUpFlags) validate() error {
	if _, err := parseClients(f.nodes); err != nil {
		return usagef("--nodes: want numbers ≥ 1, got %q", f.nodes)
	}
	if f.clients < 1 {
		return usagef("--clients must be ≥ 1")
	}
	return nil
}

func runBenchCatchUp(ctx context.Context, cmd *cobra.Command, f *benchCatchUpFlags) error {
	sizes, _ := parseClients(f.nodes)
	sort.Ints(sizes)
	storeLog, err := useStoreBin(cmd, f.storeBin, f.storeLog)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	runs, err := bench.RunCatchUp(ctx, bench.CatchUpSpec{Nodes: sizes, Clients: f.clients, Log: cmd.ErrOrStderr(), StoreLog: storeLog}, func(r *bench.CatchUpRun) {
		if r.Failed != "" {
			fmt.Fprintf(w, "%8d nodes: FAILED: %s\n", r.Nodes, r.Failed)
			return
		}
		fmt.Fprintf(w, "%8d nodes (%d objects, %s of values): loaded in %.1f s; learner ready in %.2f s, serving in %.2f s; anonymous memory learner %s vs leader %s (×%.3f); learner CPU %.1f s, leader CPU during catch-up %.1f s (memory settled %.0f s after serving)\n",
			r.Nodes, r.Objects, bench.FmtBytes(float64(r.ValueBytes)), r.LoadSeconds, r.ReadySeconds, r.ServingSeconds,
			bench.FmtBytes(float64(r.LearnerAnon)), bench.FmtBytes(float64(r.LeaderAnon)), r.AnonRatio, r.LearnerCPU, r.LeaderCPU, r.SettleSeconds)
	})
	if err != nil {
		return err
	}
	var ok []*bench.CatchUpRun
	for _, r := range runs {
		if r.Failed == "" {
			ok = append(ok, r)
		}
	}
	var model *bench.CatchUpModel
	summary := ""
	if len(ok) >= 3 {
		m := bench.FitCatchUp(ok[:len(ok)-1], ok[len(ok)-1])
		model = &m
		summary += fmt.Sprintf("model fitted on %v nodes: serving = %.2f s + %.3f µs × objects; checked at %d nodes: predicted %.2f s, measured %.2f s (error %+.1f %%)\n",
			m.FittedOn, m.FixedSeconds, m.PerObjectMicros, m.PredictedNodes, m.PredictedSeconds, m.MeasuredSeconds, m.ErrorPercent)
		all := bench.FitCatchUp(ok, nil)
		million := int64(3_000_000)
		summary += fmt.Sprintf("fitted on every size: serving = %.2f s + %.3f µs × objects → 1M nodes + 1M pods + 1M Leases (3M objects): %.1f s (target ≤ 60 s); leader anonymous memory %.0f B per object + %s → %s per member at 3M objects\n",
			all.FixedSeconds, all.PerObjectMicros, all.Predict(million), all.AnonBytesPerObj, bench.FmtBytes(all.AnonFixedBytes),
			bench.FmtBytes(all.AnonFixedBytes+all.AnonBytesPerObj*float64(million)))
	}
	fmt.Fprint(w, summary)
	return writeBenchOut(f.out, map[string]any{"runs.json": runs, "model.json": model}, summary)
}
