package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/storeproc"
	"github.com/meganode/meganode/internal/testcerts"
)

func newBenchCmd() *cobra.Command {
	cmd := group("bench",
		"load meganode-store and real etcd side by side (put, lease-flood, watch, range; memory, replay, soak; report)",
		`bench runs one workload against meganode-store and/or real etcd (each started fresh on a
free loopback port for every run, or --endpoints for a server already running) and
reports ops/s, latency p50/p90/p99/p99.9/max, errors, server CPU µs per operation and
server peak RSS (from /proc). --target both interleaves meganode/etcd for --rounds and
reports medians and ratios; --clients 1,16,64,256,1000 sweeps and charts the result.
'bench memory' and 'bench replay' measure memory and restart time with many keys;
'bench report' merges results into docs/benchmarks.md ('make bench' runs the set).`,
		`  meganode bench put --target both --clients 1,16,100,1000 --out /tmp/put
  meganode bench lease-flood --clients 1000 --leases 10000 --target meganode
  meganode bench memory --keys 100000
  meganode bench report --in /tmp/put,/tmp/lease --md docs/benchmarks.md`)
	for _, w := range bench.Workloads {
		cmd.AddCommand(newBenchWorkloadCmd(w))
	}
	cmd.AddCommand(newBenchReportCmd(), newBenchReplayCmd(), newBenchMemoryCmd(), newBenchSoakCmd(), newBenchStateCmd(), newBenchStateWritersCmd(), newBenchFailoverCmd(), newBenchGroupPutCmd(), newBenchCatchUpCmd(), newBenchWatchFanoutCmd(), newBenchAPIFailoverCmd(), newBenchMigrateCmd())
	cmd.AddCommand(newBenchHeartbeatCmd())
	cmd.AddCommand(newBenchNodesCmd()) // bench_nodes.go: hollow kubelets vs KWOK (issue 39)
	cmd.AddCommand(newBenchScaleCmd()) // bench_scale.go: N nodes and M pods through kube-apiserver, meganode vs stock (issue 37)
	return cmd
}

// benchWorkloads describes each workload for its help.
var benchWorkloads = map[string]struct{ short, long, example string }{
	"put": {"writers putting values of --val-size to --key-space-size keys",
		"put: --clients writers on --conns connections put --val-size values to random (or --sequential-keys) keys of --key-space-size.",
		"  meganode bench put --target both --clients 1,16,100,1000 --store-args=--durability=fsync --etcd-data-dir /var/tmp/bench"},
	"lease-flood": {"kubelets renewing node Leases with kube-apiserver's update Txn",
		"lease-flood: --clients kubelets renew --leases node Lease objects (kube-apiserver's protobuf encoding) with the optimistic-concurrency Txn kube-apiserver sends.",
		"  meganode bench lease-flood --target both --clients 100,1000 --leases 10000"},
	"watch": {"watchers on a prefix while writers write; delivery delay and missing events",
		"watch: --watchers apiserver-style watch streams on a prefix while --clients writers write; reports events/s, write→event delay and missing events.",
		"  meganode bench watch --target both --clients 100 --watchers 10"},
	"range": {"paginated LISTs of --keys keys at the latest and an old revision",
		"range: --clients listers page (--page-limit per page) through --keys keys at the latest revision and at an old one, as kube-apiserver's LIST does.",
		"  meganode bench range --target both --keys 100000 --page-limit 500"},
	"get-missing": {"the floor: a Range of a key that does not exist, as put's shape",
		"get-missing: --clients readers on --conns connections get random missing keys (linearizable): the server's cost of a unary RPC that does no store work, to set beside put's.",
		"  meganode bench get-missing --target both --clients 100,1000"},
	"status": {"the floor: the Maintenance Status RPC",
		"status: --clients callers on --conns connections call Status: the server's cost of a unary RPC that touches no key.",
		"  meganode bench status --target both --clients 100,1000"},
}

// Per-workload defaults of the shared flags.
var benchDefaults = map[string]map[string]string{
	"put":         {"clients": "1000", "conns": "10", "key-size": "48", "val-size": "1024", "key-space-size": "100000"},
	"lease-flood": {"clients": "1000", "conns": "10", "leases": "10000"},
	"watch":       {"clients": "100", "conns": "10", "watchers": "10", "key-size": "16", "val-size": "1024", "key-space-size": "10000"},
	"range":       {"clients": "10", "conns": "10", "key-size": "32", "val-size": "1024", "keys": "100000"},
	"get-missing": {"clients": "1000", "conns": "10", "key-size": "48", "key-space-size": "100000"},
	"status":      {"clients": "1000", "conns": "10"},
}

// benchFlags are a workload command's flags.
type benchFlags struct {
	workload                          string
	clients                           string
	conns                             int
	total                             int64
	duration                          time.Duration
	rate                              float64
	keySize, valSize, keySpace        int
	seqKeys                           bool
	leases, watchers, keys, pageLimit int
	target                            string
	rounds                            int
	endpoints                         string
	serverPid                         int
	storeBin, storeArgs, storeDataDir string
	etcdDataDir, label, out           string
	tls                               bool
	replicas                          int
	quiet, serverLog                  bool
	counts                            []int    // parsed --clients
	kinds                             []string // parsed --target
	durationSet, totalSet             bool
}

func newBenchWorkloadCmd(workload string) *cobra.Command {
	f := &benchFlags{workload: workload}
	d := benchWorkloads[workload]
	cmd := &cobra.Command{
		Use:   workload,
		Short: d.short,
		Long: d.long + `

Each run starts the server(s) fresh on a free loopback port (or uses --endpoints) and
reports ops/s, latency p50/p90/p99/p99.9/max, errors, server CPU µs per operation and server
peak RSS (from /proc). --target both interleaves meganode/etcd for --rounds and reports
medians and ratios; a comma list in --clients sweeps and charts the result. --total runs a
fixed number of operations instead of --duration. --store-replicas N starts each server as a
group of N members on loopback (meganode-store's replicated group, an N-member etcd cluster),
the load's clients given every member; server CPU per operation and peak RSS are then summed
over the members' processes (the largest member's peak RSS is reported too).`,
		Example: d.example + "\n  meganode bench " + workload + " --target both --store-replicas 3 --clients 100" +
			"\n  meganode bench " + workload + " --target meganode --endpoints 127.0.0.1:2379 --server-pid $(pgrep -n meganode-store)",
		Args: noArgs,
		RunE: action(f, runBench),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.clients, "clients", "1000", "concurrent clients; a comma list (1,16,64,256,1000) sweeps")
	fs.IntVar(&f.conns, "conns", 10, "gRPC connections shared by the clients (capped at the client count)")
	fs.Int64Var(&f.total, "total", 0, "operations per run (wins over --duration)")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "length of each run when --total is 0")
	fs.Float64Var(&f.rate, "rate", 0, "total operations per second; 0 = as fast as possible")
	fs.IntVar(&f.keySize, "key-size", 48, "key size in bytes")
	fs.IntVar(&f.valSize, "val-size", 1024, "value size in bytes")
	fs.IntVar(&f.keySpace, "key-space-size", 100000, "number of distinct keys written")
	fs.BoolVar(&f.seqKeys, "sequential-keys", false, "write keys in sequence instead of at random")
	fs.IntVar(&f.leases, "leases", 10000, "lease-flood: node Lease objects (split over the clients)")
	fs.IntVar(&f.watchers, "watchers", 10, "watch: watch streams on the prefix, one connection each")
	fs.IntVar(&f.keys, "keys", 100000, "range: keys under the listed prefix")
	fs.IntVar(&f.pageLimit, "page-limit", 500, "range: keys per page")
	fs.StringVar(&f.target, "target", "both", "meganode, etcd or both")
	fs.IntVar(&f.rounds, "rounds", 0, "rounds per point (default 3 with --target both, else 1)")
	fs.StringVar(&f.endpoints, "endpoints", "", "use this running server (comma list) instead of starting one")
	fs.IntVar(&f.serverPid, "server-pid", 0, "with --endpoints: pid of the server, to measure its CPU and memory")
	fs.StringVar(&f.storeBin, "store-bin", "", "meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	fs.StringVar(&f.storeArgs, "store-args", "", "extra flags for meganode-store, space-separated (e.g. --durability=fsync)")
	fs.StringVar(&f.storeDataDir, "store-data-dir", "", "parent of the store's data directories (default: same as --etcd-data-dir)")
	fs.StringVar(&f.etcdDataDir, "etcd-data-dir", bench.DefaultDataRoot, "parent of etcd's data directories (tmpfs = etcd's best case; a disk path when comparing fsync)")
	fs.StringVar(&f.label, "label", "", "names a variant in the results, e.g. buffered or fsync")
	fs.IntVar(&f.replicas, "store-replicas", 1, "members of each server's group: meganode-store's replicated group (etcd's cluster flags; durability replicated unless --store-args says otherwise) and an etcd cluster of as many; the clients get every member, server CPU and memory are summed over them")
	fs.BoolVar(&f.tls, "tls", false, "mutual TLS: both servers serve https with client-certificate auth (fresh certificates), as kube-apiserver talks to etcd in production")
	fs.StringVar(&f.out, "out", "", "directory for results.json, summary.txt, PNG charts and report.html")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress output")
	fs.BoolVar(&f.serverLog, "server-log", false, "show the servers' own log on stderr")
	setDefaults(fs, benchDefaults[workload])
	// The other workloads' own flags still parse but stay out of this one's help.
	for flag, w := range map[string]string{"leases": "lease-flood", "watchers": "watch", "keys": "range", "page-limit": "range"} {
		if w != workload {
			_ = fs.MarkHidden(flag)
		}
	}
	completeValues(cmd, "target", "both", bench.TargetMeganode, bench.TargetEtcd)
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		f.durationSet, f.totalSet = cmd.Flags().Changed("duration"), cmd.Flags().Changed("total")
	}
	return cmd
}

func (f *benchFlags) validate() error {
	var err error
	if f.counts, err = parseInts(f.clients); err != nil {
		return usagef("--clients: %v", err)
	}
	switch f.target {
	case "both":
		f.kinds = []string{bench.TargetMeganode, bench.TargetEtcd}
	case bench.TargetMeganode, bench.TargetEtcd:
		f.kinds = []string{f.target}
	default:
		return usagef("--target: want meganode, etcd or both, got %q", f.target)
	}
	if f.endpoints != "" && len(f.kinds) != 1 {
		return usagef("--endpoints names one server: say which with --target meganode or --target etcd")
	}
	if f.tls && f.endpoints != "" {
		return usagef("--tls makes its own certificates for the servers it starts: not with --endpoints")
	}
	if f.replicas < 1 {
		return usagef("--store-replicas must be ≥ 1")
	}
	if f.replicas > 1 && f.endpoints != "" {
		return usagef("--store-replicas starts groups of members: not with --endpoints (a running server's CPU is read from its one --server-pid)")
	}
	return nil
}

func runBench(ctx context.Context, cmd *cobra.Command, f *benchFlags) error {
	duration := f.duration
	if !f.durationSet && f.totalSet {
		duration = 0
	}
	kinds, rounds := f.kinds, f.rounds
	if rounds <= 0 {
		rounds = 1
		if len(kinds) == 2 {
			rounds = 3
		}
	}
	storeDataDir := f.storeDataDir
	if storeDataDir == "" {
		storeDataDir = f.etcdDataDir
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var certs *testcerts.Paths
	if f.tls {
		dir, err := os.MkdirTemp("", "meganode-bench-certs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		p, err := testcerts.Generate(dir)
		if err != nil {
			return err
		}
		certs = &p
	}
	label := f.label
	if f.tls {
		label = strings.TrimPrefix(label+" mTLS", " ")
	}
	var specs []bench.TargetSpec
	for _, k := range kinds {
		spec := bench.TargetSpec{
			Kind: k, Pid: f.serverPid,
			StoreBin: f.storeBin, StoreArgs: strings.Fields(f.storeArgs), StoreDataRoot: storeDataDir,
			EtcdCmd: []string{self, "etcd"}, EtcdDataRoot: f.etcdDataDir, TLS: certs, Members: f.replicas,
		}
		if f.endpoints != "" {
			spec.Endpoints = strings.Split(f.endpoints, ",")
		}
		if f.serverLog {
			spec.Log = os.Stderr
		}
		if k == bench.TargetMeganode && f.endpoints == "" && spec.StoreBin == "" {
			if spec.StoreBin, err = storeproc.FindBin(); err != nil {
				return err
			}
		}
		specs = append(specs, spec)
	}
	var prog *bench.Progress
	if !f.quiet {
		prog = bench.NewProgress(os.Stderr)
	}
	plan := bench.Plan{
		Workload: f.workload,
		Cfg: bench.Config{
			Conns: f.conns, Total: f.total, Duration: duration, Rate: f.rate,
			KeySize: f.keySize, ValSize: f.valSize, KeySpaceSize: f.keySpace, SequentialKeys: f.seqKeys,
			Leases: f.leases, Watchers: f.watchers, Keys: f.keys, PageLimit: f.pageLimit, Label: label,
		},
		ClientCounts: f.counts,
		Targets:      specs,
		Rounds:       rounds,
		Progress:     prog,
		Command:      append([]string{"meganode"}, os.Args[1:]...),
	}
	// The load generator shares the cores with the server: spend less of them on GC.
	debug.SetGCPercent(400)
	rep := plan.Execute(ctx)
	fmt.Println()
	bench.WriteTable(os.Stdout, rep)
	if f.out != "" {
		if err := bench.WriteOutputs(f.out, rep); err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (%s, summary.txt, report.html, charts)\n", f.out, bench.ResultsFile)
	}
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d run(s) failed", len(rep.Failures))
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}
