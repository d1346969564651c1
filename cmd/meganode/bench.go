package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/storeproc"
)

func init() {
	register("bench", "load meganode-store and real etcd side by side (put, lease-flood, watch, range; report)", runBench)
}

const benchUsage = `usage: meganode bench <put|lease-flood|watch|range> [flags]
       meganode bench report --in DIR[,DIR...] --md FILE [--charts DIR]
       meganode bench replay [--keys 1000000] [--val-size 350] [--durability buffered|fsync]
       meganode bench memory [--keys 1000000] [--updates 10] [--target both]
       meganode bench soak [--duration 1h] [--rate 5000] [--clients 200] (etcd's benchmark tool; make soak)

Runs one workload against meganode-store and/or real etcd (each started fresh on a
free loopback port for every run, or --endpoints for a server already running) and
reports ops/s, latency p50/p90/p99/p99.9/max, errors, server CPU µs per operation and
server peak RSS (from /proc). --target both interleaves meganode/etcd for --rounds and
reports medians and ratios; --clients 1,16,64,256,1000 sweeps and charts the result.
`

// Per-workload defaults for flags the user did not set.
var benchDefaults = map[string]map[string]string{
	"put":         {"clients": "1000", "conns": "10", "key-size": "48", "val-size": "1024", "key-space-size": "100000"},
	"lease-flood": {"clients": "1000", "conns": "10", "leases": "10000"},
	"watch":       {"clients": "100", "conns": "10", "watchers": "10", "key-size": "16", "val-size": "1024", "key-space-size": "10000"},
	"range":       {"clients": "10", "conns": "10", "key-size": "32", "val-size": "1024", "keys": "100000"},
}

func runBench(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, benchUsage)
		return nil
	}
	workload := args[0]
	if workload == "report" {
		return runBenchReport(args[1:])
	}
	if workload == "replay" {
		return runBenchReplay(args[1:])
	}
	if workload == "memory" {
		return runBenchMemory(args[1:])
	}
	if workload == "soak" {
		return runBenchSoak(args[1:])
	}
	known := false
	for _, w := range bench.Workloads {
		known = known || w == workload
	}
	if !known {
		fmt.Fprint(os.Stderr, benchUsage)
		return fmt.Errorf("unknown workload %q", workload)
	}

	fs := flag.NewFlagSet("bench "+workload, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage, "\nflags:\n"); fs.PrintDefaults() }
	clients := fs.String("clients", "1000", "concurrent clients; a comma list (1,16,64,256,1000) sweeps")
	conns := fs.Int("conns", 10, "gRPC connections shared by the clients (capped at the client count)")
	total := fs.Int64("total", 0, "operations per run (wins over --duration)")
	duration := fs.Duration("duration", 10*time.Second, "length of each run when --total is 0")
	rateLimit := fs.Float64("rate", 0, "total operations per second; 0 = as fast as possible")
	keySize := fs.Int("key-size", 48, "key size in bytes")
	valSize := fs.Int("val-size", 1024, "value size in bytes")
	keySpace := fs.Int("key-space-size", 100000, "number of distinct keys written")
	seqKeys := fs.Bool("sequential-keys", false, "write keys in sequence instead of at random")
	leases := fs.Int("leases", 10000, "lease-flood: node Lease objects (split over the clients)")
	watchers := fs.Int("watchers", 10, "watch: watch streams on the prefix, one connection each")
	keys := fs.Int("keys", 100000, "range: keys under the listed prefix")
	pageLimit := fs.Int("page-limit", 500, "range: keys per page")
	target := fs.String("target", "both", "meganode, etcd or both")
	rounds := fs.Int("rounds", 0, "rounds per point (default 3 with --target both, else 1)")
	endpoints := fs.String("endpoints", "", "use this running server (comma list) instead of starting one")
	serverPid := fs.Int("server-pid", 0, "with --endpoints: pid of the server, to measure its CPU and memory")
	storeBin := fs.String("store-bin", "", "meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	storeArgs := fs.String("store-args", "", "extra flags for meganode-store, space-separated (e.g. --durability=fsync)")
	storeDataDir := fs.String("store-data-dir", "", "parent of the store's data directories (default: same as --etcd-data-dir)")
	etcdDataDir := fs.String("etcd-data-dir", bench.DefaultDataRoot, "parent of etcd's data directories (tmpfs = etcd's best case; a disk path when comparing fsync)")
	label := fs.String("label", "", "names a variant in the results, e.g. buffered or fsync")
	out := fs.String("out", "", "directory for results.json, summary.txt, PNG charts and report.html")
	quiet := fs.Bool("quiet", false, "no progress output")
	serverLog := fs.Bool("server-log", false, "show the servers' own log on stderr")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range benchDefaults[workload] {
		if !set[name] {
			if err := fs.Set(name, v); err != nil {
				return err
			}
		}
	}
	counts, err := parseInts(*clients)
	if err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	if !set["duration"] && set["total"] {
		*duration = 0
	}

	var kinds []string
	switch *target {
	case "both":
		kinds = []string{bench.TargetMeganode, bench.TargetEtcd}
	case bench.TargetMeganode, bench.TargetEtcd:
		kinds = []string{*target}
	default:
		return fmt.Errorf("--target: want meganode, etcd or both, got %q", *target)
	}
	if *endpoints != "" && len(kinds) != 1 {
		return errors.New("--endpoints names one server: say which with --target meganode or --target etcd")
	}
	if *rounds <= 0 {
		*rounds = 1
		if len(kinds) == 2 {
			*rounds = 3
		}
	}
	if *storeDataDir == "" {
		*storeDataDir = *etcdDataDir
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var specs []bench.TargetSpec
	for _, k := range kinds {
		spec := bench.TargetSpec{
			Kind: k, Pid: *serverPid,
			StoreBin: *storeBin, StoreArgs: strings.Fields(*storeArgs), StoreDataRoot: *storeDataDir,
			EtcdCmd: []string{self, "etcd"}, EtcdDataRoot: *etcdDataDir,
		}
		if *endpoints != "" {
			spec.Endpoints = strings.Split(*endpoints, ",")
		}
		if *serverLog {
			spec.Log = os.Stderr
		}
		if k == bench.TargetMeganode && *endpoints == "" && spec.StoreBin == "" {
			if spec.StoreBin, err = storeproc.FindBin(); err != nil {
				return err
			}
		}
		specs = append(specs, spec)
	}
	var prog *bench.Progress
	if !*quiet {
		prog = bench.NewProgress(os.Stderr)
	}
	plan := bench.Plan{
		Workload: workload,
		Cfg: bench.Config{
			Conns: *conns, Total: *total, Duration: *duration, Rate: *rateLimit,
			KeySize: *keySize, ValSize: *valSize, KeySpaceSize: *keySpace, SequentialKeys: *seqKeys,
			Leases: *leases, Watchers: *watchers, Keys: *keys, PageLimit: *pageLimit, Label: *label,
		},
		ClientCounts: counts,
		Targets:      specs,
		Rounds:       *rounds,
		Progress:     prog,
		Command:      append([]string{"meganode", "bench"}, args...),
	}
	// The load generator shares the cores with the server: spend less of them on GC.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := plan.Execute(ctx)
	fmt.Println()
	bench.WriteTable(os.Stdout, rep)
	if *out != "" {
		if err := bench.WriteOutputs(*out, rep); err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (%s, summary.txt, report.html, charts)\n", *out, bench.ResultsFile)
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

// runBenchReport merges results.json files and writes the markdown report, its
// PNG charts, the merged JSON and an HTML page next to the charts.
func runBenchReport(args []string) error {
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	in := fs.String("in", "", "results directories or files, comma-separated")
	md := fs.String("md", "", "markdown file to write (e.g. docs/benchmarks.md)")
	charts := fs.String("charts", "", "directory for the PNG charts, merged results.json and index.html (default: bench/ beside --md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *md == "" {
		return errors.New("--in and --md are required")
	}
	var reps []*bench.Report
	for _, p := range strings.Split(*in, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		r, err := bench.ReadReport(p)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	rep := bench.Merge(reps...)
	if *charts == "" {
		*charts = filepath.Join(filepath.Dir(*md), "bench")
	}
	cs := bench.Charts(rep)
	if err := bench.WritePNGs(*charts, cs); err != nil {
		return err
	}
	if err := rep.WriteJSON(filepath.Join(*charts, bench.ResultsFile)); err != nil {
		return err
	}
	hf, err := os.Create(filepath.Join(*charts, "index.html"))
	if err != nil {
		return err
	}
	bench.WriteHTML(hf, rep, cs)
	if err := hf.Close(); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(*md), *charts)
	if err != nil {
		rel = *charts
	}
	prefix := filepath.ToSlash(rel) + "/"
	f, err := os.Create(*md)
	if err != nil {
		return err
	}
	bench.WriteMarkdown(f, rep, cs, prefix)
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %d charts in %s\n", *md, len(cs), *charts)
	if len(rep.Failures) > 0 {
		return fmt.Errorf("the results record %d failed run(s); see %s", len(rep.Failures), *md)
	}
	return nil
}
