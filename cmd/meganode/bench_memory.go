package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/bench"
)

type benchMemoryFlags struct {
	keys, updates, valSize int
	targets, endpoint      string
	pid                    int
	out                    string
}

// newBenchMemoryCmd measures what a store holds in memory (and, for etcd, on disk) after N
// Lease-sized keys are each written U times and history is compacted — the shape of a large
// cluster's node leases between compactions.
func newBenchMemoryCmd() *cobra.Command {
	f := &benchMemoryFlags{}
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "memory (and etcd's db file) after many Lease-sized keys are written and compacted",
		Long: `memory writes --keys Lease-sized keys (--val-size bytes) --updates times each into a fresh
meganode-store and/or etcd, compacts the history (and defragments etcd, as an operator
would), and reports the server's RSS and etcd's db file size: the shape of a large
cluster's node leases between compactions. The goal is meganode's RSS ≤ 0.5× etcd's
RSS + db file.`,
		Example: `  meganode bench memory --keys 1000000 --updates 10 --out bin/bench-results/memory
  meganode bench memory --keys 100000 --target meganode`,
		Args: noArgs,
		RunE: action(f, runBenchMemory),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.keys, "keys", 1000000, "keys")
	fs.IntVar(&f.updates, "updates", 10, "writes per key")
	fs.IntVar(&f.valSize, "val-size", 350, "value size")
	fs.StringVar(&f.targets, "target", "both", "meganode|etcd|both")
	fs.StringVar(&f.endpoint, "endpoints", "", "a running server instead (with --target meganode|etcd and --server-pid)")
	fs.IntVar(&f.pid, "server-pid", 0, "pid of the --endpoints server")
	fs.StringVar(&f.out, "out", "", "directory for results.json (read by 'meganode bench report')")
	completeValues(cmd, "target", "both", bench.TargetMeganode, bench.TargetEtcd)
	return cmd
}

func (f *benchMemoryFlags) validate() error {
	if err := oneOf("target", f.targets, "both", bench.TargetMeganode, bench.TargetEtcd); err != nil {
		return err
	}
	if f.endpoint != "" && f.targets == "both" {
		return usagef("--endpoints names one server: say which with --target meganode or --target etcd")
	}
	return nil
}

func runBenchMemory(ctx context.Context, cmd *cobra.Command, f *benchMemoryFlags) error {
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if f.targets != "both" {
		kinds = []string{f.targets}
	}
	results := map[string][3]float64{}
	for _, kind := range kinds {
		spec := bench.TargetSpec{Kind: kind}
		if f.endpoint != "" {
			spec.Endpoints, spec.Pid = []string{f.endpoint}, f.pid
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
		value := strings.Repeat("l", f.valSize)
		var lastRev int64
		for u := 0; u < f.updates; u++ {
			rev, err := writeLeaseKeys(cli, f.keys, value, nil)
			if err != nil {
				cli.Close()
				t.Close()
				return fmt.Errorf("%s: %w", kind, err)
			}
			lastRev = rev
			fmt.Fprintf(os.Stderr, "\r%s: pass %d/%d done (%s)", kind, u+1, f.updates, time.Since(start).Round(time.Second))
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
	if f.out != "" {
		rep := &bench.Report{Meta: bench.NewMeta(append([]string{"meganode"}, os.Args[1:]...)),
			Memory: &bench.MemoryResult{Keys: f.keys, Updates: f.updates, ValueSize: f.valSize,
				MeganodeRSS: m[0], EtcdRSS: e[0], EtcdDB: e[1]}}
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return err
		}
		if err := rep.WriteJSON(filepath.Join(f.out, bench.ResultsFile)); err != nil {
			return err
		}
	}
	fmt.Printf("memory after %d keys × %d writes (%d B values), compacted: meganode RSS %.0f MiB; etcd RSS %.0f MiB + db file %.0f MiB",
		f.keys, f.updates, f.valSize, m[0], e[0], e[1])
	if e[0]+e[1] > 0 && m[0] > 0 {
		fmt.Printf("; ratio %.2f× (goal ≤ 0.5×)", m[0]/(e[0]+e[1]))
	}
	fmt.Println()
	return nil
}
