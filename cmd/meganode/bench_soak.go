package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchSoakFlags struct {
	duration, compact, chunk                         time.Duration
	rate, clients, conns, keySpace, valSize, keySize int
	bin, dataDir, storeArgs, targets, out            string
}

// newBenchSoakCmd is `make soak`: etcd's own benchmark tool against meganode-store and real
// etcd side by side (started fresh, data on --data-dir), node-lease-like load, one sample per
// minute of RSS, data-dir size and latency (docs/bench/soak).
func newBenchSoakCmd() *cobra.Command {
	f := &benchSoakFlags{}
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "hours of steady node-lease-like writes with etcd's benchmark tool, store and etcd side by side",
		Long: `soak runs etcd's own benchmark tool (tools/benchmark put, built by 'make etcd-benchmark')
against a fresh meganode-store and a fresh etcd at the same time: --rate puts/s each over
--key-space-size keys of --val-size bytes, compacting every --compact-interval as
kube-apiserver does. The tool prints percentiles only at the end of a run, so the soak is a
series of --chunk-long runs, one sample each: RSS, data-dir size, p99, p99.9 and max per
minute, written to --out as soak.json, summary.txt, soak.log and charts.`,
		Example: `  make soak                                   # one hour, docs/bench/soak
  meganode bench soak --duration 5m --out docs/bench/soak/short-5m`,
		Args: noArgs,
		RunE: action(f, runBenchSoak),
	}
	fs := cmd.Flags()
	fs.DurationVar(&f.duration, "duration", time.Hour, "length of the soak")
	fs.IntVar(&f.rate, "rate", 5000, "puts per second per server")
	fs.IntVar(&f.clients, "clients", 200, "benchmark clients per server")
	fs.IntVar(&f.conns, "conns", 10, "gRPC connections per server")
	fs.IntVar(&f.keySpace, "key-space-size", 10000, "keys written (node leases)")
	fs.IntVar(&f.valSize, "val-size", 400, "value size")
	fs.IntVar(&f.keySize, "key-size", 8, "key size (etcd benchmark's default)")
	fs.DurationVar(&f.compact, "compact-interval", time.Minute, "the benchmark's --compact-interval")
	fs.DurationVar(&f.chunk, "chunk", 61*time.Second, "one benchmark run, one sample: a minute, plus the second in which it compacts")
	fs.StringVar(&f.bin, "benchmark-bin", "bin/benchmark", "etcd's tools/benchmark binary (`make etcd-benchmark`)")
	fs.StringVar(&f.dataDir, "data-dir", "", "parent of both servers' data directories (default: tmpfs)")
	fs.StringVar(&f.storeArgs, "store-args", "", "extra flags for meganode-store, space-separated")
	fs.StringVar(&f.targets, "target", "both", "meganode, etcd or both")
	fs.StringVar(&f.out, "out", "docs/bench/soak", "directory for soak.json, summary.txt, soak.log and the charts")
	completeValues(cmd, "target", "both", bench.TargetMeganode, bench.TargetEtcd)
	return cmd
}

func (f *benchSoakFlags) validate() error {
	if err := oneOf("target", f.targets, "both", bench.TargetMeganode, bench.TargetEtcd); err != nil {
		return err
	}
	if f.chunk <= f.compact {
		return usagef("--chunk %v must be longer than --compact-interval %v: each run compacts once", f.chunk, f.compact)
	}
	return nil
}

func runBenchSoak(ctx context.Context, _ *cobra.Command, f *benchSoakFlags) error {
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(f.out, "soak.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	var logMu sync.Mutex
	log := &lockedWriter{w: logf, mu: &logMu}
	cfg := bench.SoakConfig{BenchmarkBin: f.bin, Duration: f.duration, Chunk: f.chunk, Rate: f.rate, Clients: f.clients, Conns: f.conns,
		KeySize: f.keySize, ValSize: f.valSize, KeySpace: f.keySpace, CompactInterval: f.compact, Log: log}
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if f.targets != "both" {
		kinds = []string{f.targets}
	}
	var started []*bench.Target
	defer func() {
		for _, t := range started {
			t.Close()
		}
	}()
	for _, k := range kinds {
		spec := bench.TargetSpec{Kind: k, StoreDataRoot: f.dataDir, EtcdDataRoot: f.dataDir, StoreArgs: strings.Fields(f.storeArgs)}
		t, err := spec.Start()
		if err != nil {
			return err
		}
		started = append(started, t)
		fmt.Fprintf(log, "started %s pid %d on %v, data %s\n", t.Name, t.Pid, t.Endpoints, t.DataDir)
	}
	fmt.Printf("soak: %v, %d puts/s per server, %d clients on %d conns, %d keys of %d B values, compact every %v; log %s\n",
		f.duration, f.rate, f.clients, f.conns, f.keySpace, f.valSize, f.compact, logf.Name())
	results := make([]*bench.SoakResult, len(started))
	var wg sync.WaitGroup
	var printMu sync.Mutex
	for i, t := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = bench.Soak(ctx, t, cfg, func(s *bench.SoakSample) {
				printMu.Lock()
				defer printMu.Unlock()
				fmt.Printf("%-8s min %3d: %6.0f ops/s p99 %7.1f ms p99.9 %7.1f ms max %7.1f ms RSS max %4d MiB data dir %4d MiB errors %d\n",
					t.Name, s.Minute, s.OpsPerSec, s.P99Ms, s.P999Ms, s.MaxMs, s.RSSMaxBytes>>20, s.DataDirBytes>>20, s.Errors)
			})
		}()
	}
	wg.Wait()
	meta := map[string]any{
		"command": strings.Join(os.Args, " "), "date": time.Now().UTC().Format(time.RFC3339), "duration": f.duration.String(),
		"rate_per_server": f.rate, "clients": f.clients, "conns": f.conns, "key_space": f.keySpace, "val_size": f.valSize, "key_size": f.keySize,
		"compact_interval": f.compact.String(), "chunk": f.chunk.String(), "benchmark_bin": f.bin, "store_args": f.storeArgs,
	}
	if err := bench.WriteSoakOutputs(f.out, meta, results); err != nil {
		return err
	}
	fmt.Print(bench.SoakSummary(results))
	fmt.Printf("wrote %s (soak.json, summary.txt, soak.log, soak-*.png)\n", f.out)
	for _, r := range results {
		if r.Err != "" {
			return fmt.Errorf("%s: %s", r.Target, r.Err)
		}
	}
	return nil
}

type lockedWriter struct {
	w  *os.File
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
