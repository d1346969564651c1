package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/clusterbench"
)

// schedBenchFlags are `scheduler bench`'s flags.
type schedBenchFlags struct {
	nodes, pods       int
	shards            string
	noStock           bool
	latPods           int
	latQPS            float64
	stateDir, jsonOut string
	nodeLease         int
	profileDir        string
	profileSec        int
	workload          string
	bindCeiling       bool
	ceilingWorkers    int
	binDir            string
	extra             []string
}

func newSchedulerBenchCmd() *cobra.Command {
	f := &schedBenchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure the meganode scheduler against the stock kube-scheduler on real 'up' clusters",
		Long: `scheduler bench runs, one after the other, an 'up' cluster with --nodes KWOK nodes for the
stock kube-scheduler (unless --no-stock) and for the meganode scheduler at each of --shards
shard counts. Each row pre-creates --pods pods while the scheduler is paused and measures the
drain (pods/s), then a paced latency phase of --latency-pods pods at --latency-qps, then
(--bind-ceiling) the apiserver's own Binding ceiling on the same cluster. It prints one table
and with --json writes the rows with the exact command line.`,
		Example: `  meganode scheduler bench --nodes 1000 --pods 2000 --shards 1,2,4
  meganode scheduler bench --workload mixed --nodes 5000 --pods 5000 --shards 1 --latency-pods 0
  meganode scheduler bench --nodes 10000 --pods 10000 --node-lease-seconds 600 --json /tmp/sched.json`,
		Args: noArgs,
		RunE: action(f, runSchedulerBench),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 1000, "KWOK nodes")
	fs.IntVar(&f.pods, "pods", 2000, "pods pre-created while the scheduler is paused, then drained")
	fs.StringVar(&f.shards, "shards", "1,2,4", "meganode shard counts to run")
	fs.BoolVar(&f.noStock, "no-stock", false, "skip the stock kube-scheduler run")
	fs.IntVar(&f.latPods, "latency-pods", 500, "pods of the paced latency phase (0: skip)")
	fs.Float64Var(&f.latQPS, "latency-qps", 100, "creation rate of the latency phase")
	fs.StringVar(&f.stateDir, "state-dir", filepath.Join(os.TempDir(), "meganode-sched-bench"), "state directory for the clusters (one at a time)")
	fs.StringVar(&f.jsonOut, "json", "", "write the rows as JSON here")
	fs.IntVar(&f.nodeLease, "node-lease-seconds", 0, "KWOK node lease duration (0 = 40 s); e.g. 600 at 10K nodes keeps lease writes from saturating the apiserver on a small machine")
	fs.StringVar(&f.profileDir, "profile-dir", "", "meganode runs: save a CPU profile of the scheduler during the drain here (<label>.pprof)")
	fs.IntVar(&f.profileSec, "profile-seconds", 15, "length of that profile")
	fs.StringVar(&f.workload, "workload", clusterbench.WorkloadUniform, "uniform: every pod 100m CPU, 64Mi on 8 CPU/32Gi nodes | mixed: pods of 100m/1/4 CPU (64Mi/1Gi/4Gi; 70/20/10 %) on nodes half 8 CPU/32Gi, half 32 CPU/128Gi")
	fs.BoolVar(&f.bindCeiling, "bind-ceiling", true, "after each row's drain and latency phases, measure the apiserver's bind ceiling on the same cluster: --pods Bindings of pods no scheduler serves, posted as fast as the scheduler's client allows")
	fs.IntVar(&f.ceilingWorkers, "bind-ceiling-workers", clusterbench.DefaultBindCeilingWorkers, "Bindings in flight in the bind ceiling phase (the meganode scheduler's --bind-workers default)")
	fs.StringVar(&f.binDir, "bin-dir", "", "directory of kube-apiserver, kwok, meganode… (default: $MEGANODE_BIN_DIR, this executable's directory, or the repository's bin/)")
	fs.StringArrayVar(&f.extra, "scheduler-arg", nil, "extra 'meganode scheduler' flag (repeatable)")
	completeValues(cmd, "workload", clusterbench.WorkloadUniform, clusterbench.WorkloadMixed)
	return cmd
}

func (f *schedBenchFlags) validate() error {
	_, err := f.options(nil)
	return err
}

// options is the benchmark's configuration from the flags.
func (f *schedBenchFlags) options(prog *bench.Progress) (clusterbench.Options, error) {
	if err := oneOf("workload", f.workload, clusterbench.WorkloadUniform, clusterbench.WorkloadMixed); err != nil {
		return clusterbench.Options{}, err
	}
	var shards []int
	for _, s := range scheduler.SplitAddrs(f.shards) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return clusterbench.Options{}, usagef("--shards: want shard counts ≥ 1, comma-separated, got %q", f.shards)
		}
		shards = append(shards, n)
	}
	return clusterbench.Options{Nodes: f.nodes, Pods: f.pods, Shards: shards, NoStock: f.noStock, LatencyPods: f.latPods, LatencyQPS: f.latQPS,
		StateDir: f.stateDir, SchedulerArg: f.extra, NodeLeaseSec: f.nodeLease, ProfileDir: f.profileDir, ProfileSec: f.profileSec, Progress: prog,
		Workload: f.workload, BindCeiling: f.bindCeiling, BindCeilingWorkers: f.ceilingWorkers, BinDir: f.binDir}, nil
}

func runSchedulerBench(ctx context.Context, cmd *cobra.Command, f *schedBenchFlags) error {
	o, err := f.options(bench.NewProgress(os.Stderr))
	if err != nil {
		return err
	}
	started := time.Now()
	rows, err := clusterbench.Run(ctx, o)
	clusterbench.Print(os.Stdout, o, rows)
	if f.jsonOut != "" {
		// The exact command line goes with the results, so a committed raw output says how it was made.
		out := map[string]any{"command": os.Args, "command_line": shellQuote(os.Args), "started": started.UTC().Format(time.RFC3339),
			"seconds": time.Since(started).Seconds(), "num_cpu": runtime.NumCPU(), "go": runtime.Version(), "options": o, "rows": rows}
		if err != nil {
			out["error"] = err.Error()
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		if werr := os.WriteFile(f.jsonOut, b, 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// shellQuote joins args into one line a POSIX shell would split back into args.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:@%+", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
