package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/procfs"
	"github.com/meganode/meganode/internal/storeproc"
)

type benchReplayFlags struct {
	keys, valSize int
	dataDir, mode string
}

// newBenchReplayCmd measures how long meganode-store takes to come back after a restart
// with N Lease-sized keys in its logs (replay time stays bounded).
func newBenchReplayCmd() *cobra.Command {
	f := &benchReplayFlags{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "how long meganode-store takes to come back after a restart with many keys in its logs",
		Long: `replay writes --keys Lease-sized keys into a fresh meganode-store (data on disk, under bin/
unless --data-dir), stops it, starts it again and reports the size of its logs and
checkpoints, the store's own replay time, the time until it answers, the key count after
the restart (it must match) and the RSS before and after.`,
		Example: `  meganode bench replay --keys 1000000
  meganode bench replay --keys 100000 --val-size 350 --durability fsync`,
		Args: noArgs,
		RunE: action(f, runBenchReplay),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.keys, "keys", 1000000, "keys to write before the restart")
	fs.IntVar(&f.valSize, "val-size", 350, "value size (a Kubernetes Lease is ~300-400 bytes)")
	fs.StringVar(&f.dataDir, "data-dir", "", "store data dir (default: a new dir under bin/, on disk)")
	fs.StringVar(&f.mode, "durability", "buffered", "durability of /registry/leases/ for this run")
	return cmd
}

func runBenchReplay(ctx context.Context, cmd *cobra.Command, f *benchReplayFlags) error {
	dir := f.dataDir
	if dir == "" {
		d, err := os.MkdirTemp("bin", "replay-")
		if err != nil {
			return err
		}
		dir, _ = filepath.Abs(d)
		defer os.RemoveAll(dir)
	}
	extra := []string{"--durability-prefix=/registry/leases/=" + f.mode}
	p, err := storeproc.Start(storeproc.Options{DataDir: dir, ExtraArgs: extra})
	if err != nil {
		return err
	}
	defer p.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, Logger: zap.NewNop(), MaxCallSendMsgSize: 64 << 20})
	if err != nil {
		return err
	}
	value := strings.Repeat("l", f.valSize)
	start := time.Now()
	_, err = writeLeaseKeys(cli, f.keys, value, func(done int) { fmt.Fprintf(os.Stderr, "\rwriting %d/%d keys", done, f.keys) })
	cli.Close()
	if err != nil {
		return err
	}
	load := time.Since(start)
	fmt.Fprintf(os.Stderr, "\rwrote %d keys of %d B in %s (%.0f keys/s)\n", f.keys, f.valSize, load.Round(time.Millisecond), float64(f.keys)/load.Seconds())
	rss := rssOf(p.Pid())
	if err := p.Stop(); err != nil {
		return err
	}
	var logBytes, ckptBytes int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			switch filepath.Ext(e.Name()) {
			case ".wal":
				logBytes += info.Size()
			case ".ckpt":
				ckptBytes += info.Size()
			}
		}
	}
	t0 := time.Now()
	if err := p.Restart(); err != nil {
		return err
	}
	ready := time.Since(t0)
	replayMs := ""
	// The tail holds both starts' lines: the last "in N ms" is this restart's.
	if ms := regexp.MustCompile(`in (\d+) ms`).FindAllStringSubmatch(p.Tail(), -1); len(ms) > 0 {
		replayMs = ms[len(ms)-1][1]
	}
	cli, err = clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	g, err := cli.Get(context.Background(), "/registry/leases/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if g.Count != int64(f.keys) {
		return fmt.Errorf("after restart %d keys, want %d", g.Count, f.keys)
	}
	fmt.Printf("replay: %d keys (%d B values, durability %s): logs %.1f MiB + checkpoints %.1f MiB; replay %s ms (store's own figure), ready after %s; RSS before restart %.0f MiB, after %.0f MiB\n",
		f.keys, f.valSize, f.mode, float64(logBytes)/(1<<20), float64(ckptBytes)/(1<<20), replayMs, ready.Round(time.Millisecond), rss, rssOf(p.Pid()))
	return nil
}

// rssOf is a process's resident set in MiB (0 if unreadable).
func rssOf(pid int) float64 {
	s, err := procfs.Status(pid)
	if err != nil {
		return 0
	}
	return float64(s["VmRSS"]) / (1 << 20)
}

// writeLeaseKeys writes n Lease keys (/registry/leases/kube-node-lease/node-NNNNNNN)
// in 128-put txns from 8 goroutines and returns the highest revision it saw.
func writeLeaseKeys(cli *clientv3.Client, n int, value string, progress func(done int)) (int64, error) {
	const perTxn = 128
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var lastRev int64
	batches := (n + perTxn - 1) / perTxn
	work := make(chan int, 64)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				ops := make([]clientv3.Op, 0, perTxn)
				for i := b * perTxn; i < (b+1)*perTxn && i < n; i++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/leases/kube-node-lease/node-%07d", i), value))
				}
				r, err := cli.Txn(context.Background()).Then(ops...).Commit()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && r.Header.Revision > lastRev {
					lastRev = r.Header.Revision
				}
				mu.Unlock()
			}
		}()
	}
	for b := 0; b < batches; b++ {
		if progress != nil && b%(batches/20+1) == 0 {
			progress(b * perTxn)
		}
		work <- b
	}
	close(work)
	wg.Wait()
	return lastRev, firstErr
}
