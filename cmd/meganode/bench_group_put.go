package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchGroupPutFlags struct {
	clients, out, storeBin, storeArgs, benchBin, dataDir string
	rounds, total, valSize, keySpace                     int
}

// newBenchGroupPutCmd: etcd's own benchmark tool against a 3-member meganode-store group and
// a 3-member etcd cluster, alternated (issue 36's throughput and CPU target).
func newBenchGroupPutCmd() *cobra.Command {
	f := &benchGroupPutFlags{}
	cmd := &cobra.Command{
		Use:   "group-put",
		Short: "etcd's benchmark put against a 3-member meganode-store group and a 3-member etcd, alternated",
		Long: `group-put starts, for every run, a fresh 3-member group — meganode-store (--durability
replicated, its group default) or real etcd v3.6 (its defaults, fsync to --data-dir) — and runs
etcd's own benchmark tool (tools/benchmark put, 'make etcd-benchmark') with every member as an
endpoint. Rounds alternate the order of the two kinds. Server CPU per put is the user+system
time of all three members over the run, divided by the puts. Writes runs.json (every run with
the tool's report), medians.json and summary.txt to --out.`,
		Example: `  meganode bench group-put --clients 100,1000 --rounds 3 --out docs/bench/replicated-put
  meganode bench group-put --store-args=--durability=fsync   # each member fdatasyncs raft's log, as etcd does`,
		Args: noArgs,
		RunE: action(f, runBenchGroupPut),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.clients, "clients", "100,1000", "benchmark clients, comma-separated (connections: a tenth of them)")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each runs every client count on both kinds, order alternated")
	fs.IntVar(&f.total, "total", 100000, "puts per run")
	fs.IntVar(&f.valSize, "val-size", 256, "value size")
	fs.IntVar(&f.keySpace, "key-space-size", 100000, "keys written")
	fs.StringVar(&f.benchBin, "benchmark-bin", "bin/benchmark", "etcd's tools/benchmark binary (`make etcd-benchmark`)")
	fs.StringVar(&f.storeBin, "store-bin", "bin/meganode-store", "meganode-store binary")
	fs.StringVar(&f.storeArgs, "store-args", "", "extra flags for every store member, space-separated (e.g. --durability=fsync)")
	fs.StringVar(&f.dataDir, "data-dir", "", "parent of the members' data directories (default: a temporary directory on disk)")
	fs.StringVar(&f.out, "out", "", "directory for runs.json, medians.json and summary.txt (default: print only)")
	return cmd
}

func (f *benchGroupPutFlags) validate() error {
	if _, err := parseClients(f.clients); err != nil {
		return err
	}
	if f.rounds < 1 || f.total < 1 || f.valSize < 1 || f.keySpace < 1 {
		return usagef("--rounds, --total, --val-size and --key-space-size must be ≥ 1")
	}
	return nil
}

func parseClients(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, usagef("--clients: want numbers ≥ 1, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func runBenchGroupPut(ctx context.Context, cmd *cobra.Command, f *benchGroupPutFlags) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	clients, _ := parseClients(f.clients)
	root := f.dataDir
	if root == "" {
		if root, err = os.MkdirTemp("", "meganode-group-put-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	w := cmd.OutOrStdout()
	runs, err := bench.RunGroupPut(ctx, bench.GroupPutSpec{Kinds: []string{bench.TargetMeganode, bench.TargetEtcd}, Clients: clients, Rounds: f.rounds,
		Total: f.total, ValSize: f.valSize, KeySpace: f.keySpace, Benchmark: f.benchBin, StoreBin: f.storeBin, StoreArgs: strings.Fields(f.storeArgs), EtcdCmd: []string{self, "etcd"},
		DataRoot: root, Log: io.Discard}, func(r *bench.GroupPutRun) {
		fmt.Fprintf(w, "round %d %-8s %5d clients: %8.0f puts/s, p99.9 %7.1f ms, max %7.1f ms, %6.1f µs server CPU per put (3 members)\n",
			r.Round, r.Kind, r.Clients, r.PutsSec, r.P999Ms, r.MaxMs, r.CPUMicrosPut)
	})
	if err != nil {
		return err
	}
	meds := bench.GroupPutMedians(runs)
	var summary string
	for _, c := range clients {
		var m, e *bench.GroupPutMedian
		for i := range meds {
			if meds[i].Clients == c && meds[i].Kind == bench.TargetMeganode {
				m = &meds[i]
			}
			if meds[i].Clients == c && meds[i].Kind == bench.TargetEtcd {
				e = &meds[i]
			}
		}
		if m == nil || e == nil {
			continue
		}
		summary += fmt.Sprintf("%5d clients, medians of %d runs: meganode %.0f puts/s, etcd %.0f (×%.2f); server CPU per put %.1f µs vs %.1f µs (%.2f of etcd's); p99.9 %.1f vs %.1f ms; max %.1f vs %.1f ms\n",
			c, m.Runs, m.PutsSec, e.PutsSec, m.PutsSec/e.PutsSec, m.CPUMicrosPut, e.CPUMicrosPut, m.CPUMicrosPut/e.CPUMicrosPut, m.P999Ms, e.P999Ms, m.MaxMs, e.MaxMs)
	}
	mode := "meganode-store --durability replicated (the group default: memory, a quorum holds each write)"
	if f.storeArgs != "" {
		mode = "meganode-store " + f.storeArgs
	}
	summary += "3 members each on this machine; " + mode + ", etcd v3.6 defaults (fsync to disk: etcd has no memory-only mode).\n"
	fmt.Fprint(w, summary)
	return writeBenchOut(f.out, map[string]any{"runs.json": runs, "medians.json": meds}, summary)
}
