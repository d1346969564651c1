package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchStateFlags struct {
	targets                      string
	nodes, clients, conns        int
	watchers, pageLimit, writers int
	watchDuration                time.Duration
	skipList, skipWatch, skipRst bool
	dataDir, storeBin, storeArgs string
	etcdQuota                    int64
	serverLog                    bool
	writersIn                    string
	out                          string
}

// newBenchStateCmd: a cluster's state (N nodes, N pods, N node Leases, as kube-apiserver stores
// them) loaded, listed, watched and restarted, in meganode-store and/or etcd (issue 14).
func newBenchStateCmd() *cobra.Command {
	f := &benchStateFlags{}
	cmd := &cobra.Command{
		Use:   "state",
		Short: "N nodes + N pods + N leases as kube-apiserver stores them: load, list, watch, restart",
		Long: `state puts a cluster's state into a fresh server — --nodes KWOK-like Nodes, as many ordinary
Pods and node Leases, built from k8s.io/api and protobuf-encoded as kube-apiserver stores them,
at its keys, created with its create Txn by --clients writers — and reports bytes per object,
load rate, server CPU per object, RSS and data directory (and etcd's db file) after compaction
(and etcd's defragmentation). Then it lists every prefix as kube-apiserver does at start (pages
of --page-limit), the pods unpaginated and by RangeStream (etcd 3.6: Unimplemented), timing each
with the server's peak RSS and the p99 of --point-writers lease renewals against idle; runs
--watchers watchers per prefix while the Leases are renewed with the update Txn for
--watch-duration (events/s, write→event delay); and finally kills the server (SIGKILL) and
restarts it on its data: time to ready and to the first full paged list of the pods.
Targets run one after the other. A phase that fails is reported as failed, not left out.`,
		Example: `  meganode bench state --nodes 100000 --target both --out docs/bench/state/n100k
  meganode bench state --nodes 2000 --target meganode --watch-duration 5s`,
		Args: noArgs,
		RunE: action(f, runBenchState),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.targets, "target", "both", "meganode|etcd|both")
	fs.IntVar(&f.nodes, "nodes", 1000000, "nodes, and as many pods and leases")
	fs.IntVar(&f.clients, "clients", 64, "concurrent writers (load and lease renewals)")
	fs.IntVar(&f.conns, "conns", 8, "gRPC connections the writers share")
	fs.IntVar(&f.watchers, "watchers", 5, "watchers per prefix (kube-apiservers' watch caches)")
	fs.IntVar(&f.pageLimit, "page-limit", 500, "page size of the lists (kube-apiserver's)")
	fs.IntVar(&f.writers, "point-writers", 4, "lease renewers timed during the lists")
	fs.StringVar(&f.writersIn, "point-writers-in", bench.WritersProcess,
		"where the point writers run: process (their own, re-executing meganode, on their own connection: a kubelet's lease write "+
			"does not come from the listing process), conns (this process, their own connection), shared (this process, the load's "+
			"connections: writer 0 on the lister's)")
	fs.DurationVar(&f.watchDuration, "watch-duration", 30*time.Second, "lease renewals under watch")
	fs.BoolVar(&f.skipList, "skip-list", false, "skip the list phase")
	fs.BoolVar(&f.skipWatch, "skip-watch", false, "skip the watch phase")
	fs.BoolVar(&f.skipRst, "skip-restart", false, "skip the kill and restart")
	fs.StringVar(&f.dataDir, "data-dir", bench.DefaultDataRoot, "parent of the servers' data directories (tmpfs: etcd's best case)")
	fs.StringVar(&f.storeBin, "store-bin", "", "meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	fs.StringVar(&f.storeArgs, "store-args", "", "extra flags for meganode-store, space-separated")
	fs.Int64Var(&f.etcdQuota, "etcd-quota-backend-bytes", 64<<30, "etcd's --quota-backend-bytes (its 2 GiB default does not hold 1M nodes' state)")
	fs.BoolVar(&f.serverLog, "server-log", false, "show the servers' own log on stderr")
	fs.StringVar(&f.out, "out", "", "directory for results.json (read by 'meganode bench report') and summary.txt")
	completeValues(cmd, "target", "both", bench.TargetMeganode, bench.TargetEtcd)
	completeValues(cmd, "point-writers-in", bench.WritersProcess, bench.WritersConns, bench.WritersShared)
	return cmd
}

func (f *benchStateFlags) validate() error {
	if err := oneOf("target", f.targets, "both", bench.TargetMeganode, bench.TargetEtcd); err != nil {
		return err
	}
	if err := oneOf("point-writers-in", f.writersIn, bench.WritersProcess, bench.WritersConns, bench.WritersShared); err != nil {
		return err
	}
	if f.nodes <= 0 || f.clients <= 0 || f.conns <= 0 || f.watchers <= 0 || f.pageLimit <= 0 || f.writers <= 0 {
		return usagef("--nodes, --clients, --conns, --watchers, --page-limit and --point-writers must be positive")
	}
	return nil
}

func runBenchState(ctx context.Context, cmd *cobra.Command, f *benchStateFlags) error {
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if f.targets != "both" {
		kinds = []string{f.targets}
	}
	cfg := bench.StateConfig{Nodes: f.nodes, Clients: f.clients, Conns: f.conns, PageLimit: f.pageLimit, Watchers: f.watchers,
		WatchDuration: f.watchDuration, PointWriters: f.writers, SkipList: f.skipList, SkipWatch: f.skipWatch,
		SkipRestart: f.skipRst, Log: os.Stderr, PointWritersIn: f.writersIn}
	if f.writersIn == bench.WritersProcess {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.WritersCmd = []string{self, "bench", "state-writers"}
	}
	rep := &bench.StateReport{Nodes: f.nodes, Clients: f.clients, Conns: min(f.conns, f.clients), PageLimit: f.pageLimit,
		Watchers: f.watchers, WatchDuration: f.watchDuration.Seconds()}
	var failures []string
	for _, kind := range kinds {
		spec := bench.TargetSpec{Kind: kind, StoreBin: f.storeBin, StoreArgs: strings.Fields(f.storeArgs),
			StoreDataRoot: f.dataDir, EtcdDataRoot: f.dataDir,
			EtcdArgs: []string{"--quota-backend-bytes", strconv.FormatInt(f.etcdQuota, 10)}}
		if f.serverLog {
			spec.Log = os.Stderr
		}
		res, err := bench.RunState(ctx, spec, cfg)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", kind, err)
		}
		if res.Failed != "" {
			failures = append(failures, fmt.Sprintf("state %s: %s", kind, res.Failed))
		}
		rep.Targets = append(rep.Targets, res)
		if ctx.Err() != nil {
			break
		}
	}
	bench.WriteStateTable(os.Stdout, rep)
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return err
		}
		all := &bench.Report{Meta: bench.NewMeta(append([]string{"meganode"}, os.Args[1:]...)), State: rep, Failures: failures}
		if err := all.WriteJSON(filepath.Join(f.out, bench.ResultsFile)); err != nil {
			return err
		}
		sf, err := os.Create(filepath.Join(f.out, "summary.txt"))
		if err != nil {
			return err
		}
		bench.WriteStateTable(sf, rep)
		if err := sf.Close(); err != nil {
			return err
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("%s", strings.Join(failures, "; "))
	}
	return nil
}

// newBenchStateWritersCmd is the point writers of `bench state --point-writers-in process`
// in their own process (bench.RunStateWriters: its protocol on stdin and stdout). Hidden.
func newBenchStateWritersCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "state-writers",
		Short:  "point writers of bench state, in their own process (internal)",
		Hidden: true,
		Long: `state-writers is the point writers of 'meganode bench state --point-writers-in process': the
bench runs it as a process of its own and drives it on stdin (a JSON line with the endpoints,
writer count, node count, creation time and lease revisions; then "phase N" lines and "stop"),
and it answers on stdout ("ready" once connected, then one JSON line: the latency histogram
and errors of each phase and the lease revisions). Not meant to be run by hand.`,
		Example: `  meganode bench state --nodes 100000 --point-writers-in process   # runs it`,
		Args:    noArgs,
		RunE: action(&struct{}{}, func(ctx context.Context, _ *cobra.Command, _ *struct{}) error {
			return bench.RunStateWriters(ctx, os.Stdin, os.Stdout)
		}),
	}
}
