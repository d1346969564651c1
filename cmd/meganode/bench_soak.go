package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

// runBenchSoak is `make soak`: etcd's own benchmark tool against meganode-store
// and real etcd side by side (started fresh, data on --data-dir), node-lease-like
// load, one sample per minute of RSS, data-dir size and latency (docs/bench/soak).
func runBenchSoak(args []string) error {
	fs := flag.NewFlagSet("bench soak", flag.ContinueOnError)
	duration := fs.Duration("duration", time.Hour, "length of the soak")
	rate := fs.Int("rate", 5000, "puts per second per server")
	clients := fs.Int("clients", 200, "benchmark clients per server")
	conns := fs.Int("conns", 10, "gRPC connections per server")
	keySpace := fs.Int("key-space-size", 10000, "keys written (node leases)")
	valSize := fs.Int("val-size", 400, "value size")
	keySize := fs.Int("key-size", 8, "key size (etcd benchmark's default)")
	compact := fs.Duration("compact-interval", time.Minute, "the benchmark's --compact-interval")
	chunk := fs.Duration("chunk", 61*time.Second, "one benchmark run, one sample: a minute, plus the second in which it compacts")
	bin := fs.String("benchmark-bin", "bin/benchmark", "etcd's tools/benchmark binary (`make etcd-benchmark`)")
	dataDir := fs.String("data-dir", "", "parent of both servers' data directories (default: tmpfs)")
	storeArgs := fs.String("store-args", "", "extra flags for meganode-store, space-separated")
	targets := fs.String("target", "both", "meganode, etcd or both")
	out := fs.String("out", "docs/bench/soak", "directory for soak.json, summary.txt, soak.log and the charts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chunk <= *compact {
		return fmt.Errorf("--chunk %v must be longer than --compact-interval %v: each run compacts once", *chunk, *compact)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(*out, "soak.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	var logMu sync.Mutex
	log := &lockedWriter{w: logf, mu: &logMu}
	cfg := bench.SoakConfig{BenchmarkBin: *bin, Duration: *duration, Chunk: *chunk, Rate: *rate, Clients: *clients, Conns: *conns,
		KeySize: *keySize, ValSize: *valSize, KeySpace: *keySpace, CompactInterval: *compact, Log: log}
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if *targets != "both" {
		kinds = []string{*targets}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var started []*bench.Target
	defer func() {
		for _, t := range started {
			t.Close()
		}
	}()
	for _, k := range kinds {
		spec := bench.TargetSpec{Kind: k, StoreDataRoot: *dataDir, EtcdDataRoot: *dataDir, StoreArgs: strings.Fields(*storeArgs)}
		t, err := spec.Start()
		if err != nil {
			return err
		}
		started = append(started, t)
		fmt.Fprintf(log, "started %s pid %d on %v, data %s\n", t.Name, t.Pid, t.Endpoints, t.DataDir)
	}
	fmt.Printf("soak: %v, %d puts/s per server, %d clients on %d conns, %d keys of %d B values, compact every %v; log %s\n",
		*duration, *rate, *clients, *conns, *keySpace, *valSize, *compact, logf.Name())
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
		"command": strings.Join(os.Args, " "), "date": time.Now().UTC().Format(time.RFC3339), "duration": duration.String(),
		"rate_per_server": *rate, "clients": *clients, "conns": *conns, "key_space": *keySpace, "val_size": *valSize, "key_size": *keySize,
		"compact_interval": compact.String(), "chunk": chunk.String(), "benchmark_bin": *bin, "store_args": *storeArgs,
	}
	if err := bench.WriteSoakOutputs(*out, meta, results); err != nil {
		return err
	}
	fmt.Print(bench.SoakSummary(results))
	fmt.Printf("wrote %s (soak.json, summary.txt, soak.log, soak-*.png)\n", *out)
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
