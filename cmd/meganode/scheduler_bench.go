package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/clusterbench"
)

func runSchedulerBench(args []string) error {
	fs := flag.NewFlagSet("scheduler bench", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1000, "KWOK nodes")
	pods := fs.Int("pods", 2000, "pods pre-created while the scheduler is paused, then drained")
	shardList := fs.String("shards", "1,2,4", "meganode shard counts to run")
	noStock := fs.Bool("no-stock", false, "skip the stock kube-scheduler run")
	latPods := fs.Int("latency-pods", 500, "pods of the paced latency phase (0: skip)")
	latQPS := fs.Float64("latency-qps", 100, "creation rate of the latency phase")
	stateDir := fs.String("state-dir", filepath.Join(os.TempDir(), "meganode-sched-bench"), "state directory for the clusters (one at a time)")
	jsonOut := fs.String("json", "", "write the rows as JSON here")
	nodeLease := fs.Int("node-lease-seconds", 0, "KWOK node lease duration (0 = 40 s); e.g. 600 at 10K nodes keeps lease writes from saturating the apiserver on a small machine")
	profileDir := fs.String("profile-dir", "", "meganode runs: save a CPU profile of the scheduler during the drain here (<label>.pprof)")
	profileSec := fs.Int("profile-seconds", 15, "length of that profile")
	workload := fs.String("workload", clusterbench.WorkloadUniform, "uniform: every pod 100m CPU, 64Mi on 8 CPU/32Gi nodes | mixed: pods of 100m/1/4 CPU (64Mi/1Gi/4Gi; 70/20/10 %) on nodes half 8 CPU/32Gi, half 32 CPU/128Gi")
	bindCeiling := fs.Bool("bind-ceiling", true, "after each row's drain and latency phases, measure the apiserver's bind ceiling on the same cluster: --pods Bindings of pods no scheduler serves, posted as fast as the scheduler's client allows")
	ceilingWorkers := fs.Int("bind-ceiling-workers", clusterbench.DefaultBindCeilingWorkers, "Bindings in flight in the bind ceiling phase (the meganode scheduler's --bind-workers default)")
	binDir := fs.String("bin-dir", "", "directory of kube-apiserver, kwok, meganode… (default: $MEGANODE_BIN_DIR, this executable's directory, or the repository's bin/)")
	var extra stringList
	fs.Var(&extra, "scheduler-arg", "extra `meganode scheduler` flag (repeatable)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	var shards []int
	for _, s := range scheduler.SplitAddrs(*shardList) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("--shards: %w", err)
		}
		shards = append(shards, n)
	}
	ctx, stop := signalContext()
	defer stop()
	o := clusterbench.Options{Nodes: *nodes, Pods: *pods, Shards: shards, NoStock: *noStock, LatencyPods: *latPods, LatencyQPS: *latQPS,
		StateDir: *stateDir, SchedulerArg: extra, NodeLeaseSec: *nodeLease, ProfileDir: *profileDir, ProfileSec: *profileSec, Progress: bench.NewProgress(os.Stderr),
		Workload: *workload, BindCeiling: *bindCeiling, BindCeilingWorkers: *ceilingWorkers, BinDir: *binDir}
	started := time.Now()
	rows, err := clusterbench.Run(ctx, o)
	clusterbench.Print(os.Stdout, o, rows)
	if *jsonOut != "" {
		// The exact command line goes with the results, so a committed raw output says how it was made.
		out := map[string]any{"command": os.Args, "command_line": shellQuote(os.Args), "started": started.UTC().Format(time.RFC3339),
			"seconds": time.Since(started).Seconds(), "num_cpu": runtime.NumCPU(), "go": runtime.Version(), "options": o, "rows": rows}
		if err != nil {
			out["error"] = err.Error()
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		if werr := os.WriteFile(*jsonOut, b, 0o644); werr != nil && err == nil {
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
