package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchFailoverFlags struct {
	targets, out, storeBin, dataDir string
	members, kills, writers         int
	downtime, settle, probe         time.Duration
}

// newBenchFailoverCmd: issue 36's failover measure, a 3-member meganode-store group and a
// 3-member etcd cluster one after the other on this machine.
func newBenchFailoverCmd() *cobra.Command {
	f := &benchFailoverFlags{}
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "SIGKILL the leader of a replicated group under load, again and again: time until writes succeed, writes lost",
		Long: `failover starts a group of --members (meganode-store with --durability replicated, and
real etcd v3.6 with its defaults, one after the other), runs --writers writers through a client
given every member, and --kills times SIGKILLs the leader: the time from the kill to the first
success of a write issued after it (each attempt bounded by --probe-timeout, then retried) is
the figure. The killed member restarts after --downtime.
At the end every acknowledged write is read back from every member (lost ones counted) and the
members' HashKV must agree. Writes failover.json and summary.txt to --out.`,
		Example: `  meganode bench failover --kills 20 --out docs/bench/failover`,
		Args:    noArgs,
		RunE:    action(f, runBenchFailover),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.targets, "target", "both", "meganode, etcd or both")
	fs.IntVar(&f.members, "members", 3, "members of each group")
	fs.IntVar(&f.kills, "kills", 20, "leader kills per group")
	fs.IntVar(&f.writers, "writers", 16, "concurrent writers")
	fs.DurationVar(&f.downtime, "downtime", time.Second, "how long a killed member stays down")
	fs.DurationVar(&f.settle, "settle", 2*time.Second, "writes between one member's restart and the next kill")
	fs.DurationVar(&f.probe, "probe-timeout", 200*time.Millisecond, "timeout of each attempt of the write issued after a kill (retried until it succeeds)")
	fs.StringVar(&f.storeBin, "store-bin", "bin/meganode-store", "meganode-store binary")
	fs.StringVar(&f.dataDir, "data-dir", "", "parent of the members' data directories (default: a temporary directory on disk)")
	fs.StringVar(&f.out, "out", "", "directory for failover.json and summary.txt (default: print only)")
	completeValues(cmd, "target", "both", bench.TargetMeganode, bench.TargetEtcd)
	return cmd
}

func (f *benchFailoverFlags) validate() error {
	if err := oneOf("target", f.targets, "both", bench.TargetMeganode, bench.TargetEtcd); err != nil {
		return err
	}
	if f.members < 3 || f.kills < 1 || f.writers < 1 || f.probe <= 0 {
		return usagef("--members ≥ 3, --kills ≥ 1 and --writers ≥ 1")
	}
	return nil
}

func runBenchFailover(ctx context.Context, cmd *cobra.Command, f *benchFailoverFlags) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	root := f.dataDir
	if root == "" {
		if root, err = os.MkdirTemp("", "meganode-failover-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	var logw io.Writer = io.Discard
	var results []*bench.FailoverResult
	kinds := []string{bench.TargetMeganode, bench.TargetEtcd}
	if f.targets != "both" {
		kinds = []string{f.targets}
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return err
		}
		lf, err := os.Create(filepath.Join(f.out, "failover.log"))
		if err != nil {
			return err
		}
		defer lf.Close()
		logw = lf
	}
	w := cmd.OutOrStdout()
	for _, k := range kinds {
		fmt.Fprintf(w, "%s: %d members, %d writers, %d leader kills…\n", k, f.members, f.writers, f.kills)
		r, err := bench.RunFailover(ctx, bench.FailoverSpec{Kind: k, Members: f.members, Kills: f.kills, Writers: f.writers,
			Downtime: f.downtime, Settle: f.settle, ProbeTimeout: f.probe, StoreBin: f.storeBin, EtcdCmd: []string{self, "etcd"},
			DataRoot: filepath.Join(root, k), Log: io.MultiWriter(logw, progressOnly(w))})
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		results = append(results, r)
	}
	var summary string
	for _, r := range results {
		summary += fmt.Sprintf("%-9s writes resumed after a leader kill: median %.0f ms, max %.0f ms over %d kills; %d writes acknowledged, %d lost; HashKV agreed: %v (revision %d)\n",
			r.Kind, r.MedianMs, r.MaxMs, len(r.Resumed), r.Acknowledged, r.Lost, r.HashAgreed, r.HashRev)
	}
	summary += "meganode-store members keep writes in memory (--durability replicated); etcd members fsync to --data-dir (etcd has no memory-only mode).\n"
	fmt.Fprint(w, summary)
	if f.out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(filepath.Join(f.out, "failover.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(f.out, "summary.txt"), []byte(summary), 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.Lost > 0 || !r.HashAgreed {
			return fmt.Errorf("%s lost %d acknowledged writes (HashKV agreed: %v)", r.Kind, r.Lost, r.HashAgreed)
		}
	}
	return nil
}

// progressOnly passes the run's own progress lines (not the members' logs) to w.
func progressOnly(w io.Writer) io.Writer {
	return lineFilter{w: w, prefix: "failover "}
}

type lineFilter struct {
	w      io.Writer
	prefix string
}

func (l lineFilter) Write(p []byte) (int, error) {
	if len(p) >= len(l.prefix) && string(p[:len(l.prefix)]) == l.prefix {
		return l.w.Write(p)
	}
	return len(p), nil
}
