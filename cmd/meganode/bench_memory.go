package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/bench"
)

// runBenchMemory measures what a store holds in memory (and, for etcd, on disk)
// after N Lease-sized keys are each written U times and history is compacted —
// the shape of a large cluster's node leases between compactions.
func runBenchMemory(args []string) error {
	fs := flag.NewFlagSet("bench memory", flag.ContinueOnError)
	keys := fs.Int("keys", 1000000, "keys")
	updates := fs.Int("updates", 10, "writes per key")
	valSize := fs.Int("val-size", 350, "value size")
	targets := fs.String("target", "both", "meganode|etcd|both")
	endpoint := fs.String("endpoints", "", "a running server instead (with --target meganode|etcd and --server-pid)")
	pid := fs.Int("server-pid", 0, "pid of the --endpoints server")
	out := fs.String("out", "", "directory for results.json (read by `meganode bench report`)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if *targets != "both" {
		kinds = []string{*targets}
	}
	results := map[string][3]float64{}
	for _, kind := range kinds {
		spec := bench.TargetSpec{Kind: kind}
		if *endpoint != "" {
			spec.Endpoints, spec.Pid = []string{*endpoint}, *pid
		}
		t, err := spec.Start()
		if err != nil {
			return err
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: t.Endpoints, Logger: zap.NewNop(), MaxCallSendMsgSize: 64 << 20})
		if err != nil {
			t.Close()
			return err
		}
		start := time.Now()
		value := strings.Repeat("l", *valSize)
		var lastRev int64
		for u := 0; u < *updates; u++ {
			rev, err := writeLeaseKeys(cli, *keys, value, nil)
			if err != nil {
				cli.Close()
				t.Close()
				return fmt.Errorf("%s: %w", kind, err)
			}
			lastRev = rev
			fmt.Fprintf(os.Stderr, "\r%s: pass %d/%d done (%s)", kind, u+1, *updates, time.Since(start).Round(time.Second))
		}
		if _, err := cli.Compact(context.Background(), lastRev, clientv3.WithCompactPhysical()); err != nil {
			return fmt.Errorf("%s compact: %w", kind, err)
		}
		if kind == bench.TargetEtcd {
			// etcd frees compacted pages only into its freelist; defragment as an operator would.
			if _, err := cli.Defragment(context.Background(), t.Endpoints[0]); err != nil {
				return fmt.Errorf("etcd defragment: %w", err)
			}
		}
		time.Sleep(2 * time.Second)
		rss := rssOf(t.Pid)
		var disk float64
		if kind == bench.TargetEtcd {
			filepath.Walk(t.DataDir, func(p string, info os.FileInfo, err error) error {
				if err == nil && strings.HasSuffix(p, "db") && !info.IsDir() {
					disk += float64(info.Size()) / (1 << 20)
				}
				return nil
			})
		}
		results[kind] = [3]float64{rss, disk, time.Since(start).Seconds()}
		fmt.Fprintf(os.Stderr, "\n%s: RSS %.0f MiB, db file %.0f MiB, %.0f s\n", kind, rss, disk, time.Since(start).Seconds())
		cli.Close()
		t.Close()
	}
	m, e := results[bench.TargetMeganode], results[bench.TargetEtcd]
	if *out != "" {
		rep := &bench.Report{Meta: bench.NewMeta(append([]string{"meganode", "bench", "memory"}, args...)),
			Memory: &bench.MemoryResult{Keys: *keys, Updates: *updates, ValueSize: *valSize,
				MeganodeRSS: m[0], EtcdRSS: e[0], EtcdDB: e[1]}}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		if err := rep.WriteJSON(filepath.Join(*out, bench.ResultsFile)); err != nil {
			return err
		}
	}
	fmt.Printf("memory after %d keys × %d writes (%d B values), compacted: meganode RSS %.0f MiB; etcd RSS %.0f MiB + db file %.0f MiB",
		*keys, *updates, *valSize, m[0], e[0], e[1])
	if e[0]+e[1] > 0 && m[0] > 0 {
		fmt.Printf("; ratio %.2f× (goal ≤ 0.5×)", m[0]/(e[0]+e[1]))
	}
	fmt.Println()
	return nil
}
