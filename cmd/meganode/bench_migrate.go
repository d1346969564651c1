package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchMigrateFlags struct {
	nodes, pods, leases, etcdLeases int
	clients, conns, pageLimit       int
	dataDir, snapshotDir            string
	storeBin, storeArgs             string
	etcdQuota                       int64
	serverLog                       bool
	out                             string
}

// newBenchMigrateCmd: `bench state`'s objects moved etcd → meganode-store → etcd, each step
// timed and every key checked at each end (issue 38's first target).
func newBenchMigrateCmd() *cobra.Command {
	f := &benchMigrateFlags{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "move N nodes' state etcd → meganode-store → etcd, timing each step and checking every key at each end",
		Long: `migrate loads 'bench state's objects — --nodes KWOK-like Nodes, --pods Pods and --leases node
Leases, created as kube-apiserver creates them, --etcd-leases real etcd leases attached to the
node Leases — into a fresh etcd 3.6 (meganode etcd, data on --data-dir), compacts at the revision
the nodes ended at, and moves that state with the tools a user runs, timing each step:
etcdctl's snapshot save, 'meganode store import' (a process of its own: its peak memory is
measured), 'meganode-store --restore-from' until it serves, 'meganode store export', etcdutl's
snapshot status and restore, and etcd started on the restored directory. The store and the etcd
restored from its export are each checked against the original etcd: every key by paginated
Range at the original's revision (key, value, create and mod revision, version, lease), HashKV
at that revision, the compaction point, the leases (ID, granted TTL, attached keys).

The original's answers are kept as one record per key (the value by its SHA-256) and the original
etcd is stopped before the conversion, so that its tmpfs backend and the converters are never in
memory together. Snapshot files go to --snapshot-dir (disk). Prints the steps and checks as a
markdown table; --out writes results.json and summary.md there. Exits 1 if a step failed or a
check found a difference.`,
		Example: `  meganode bench migrate --nodes 10000
  meganode bench migrate --nodes 1000000 --out docs/bench/migrate/n1m`,
		Args: noArgs,
		RunE: action(f, runBenchMigrate),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 1000000, "nodes")
	fs.IntVar(&f.pods, "pods", 0, "pods (0: as many as --nodes)")
	fs.IntVar(&f.leases, "leases", 0, "node Lease objects (0: as many as --nodes)")
	fs.IntVar(&f.etcdLeases, "etcd-leases", 1000, "real etcd leases (TTL 3600-3659 s) attached to the node Leases in consecutive batches (0: none, as bench state)")
	fs.IntVar(&f.clients, "clients", 64, "concurrent writers of the load")
	fs.IntVar(&f.conns, "conns", 8, "gRPC connections the writers share")
	fs.IntVar(&f.pageLimit, "page-limit", 5000, "keys per page of the checks' Range (etcd counts the rest of the range for every page: larger pages, fewer counts)")
	fs.StringVar(&f.dataDir, "data-dir", bench.DefaultDataRoot, "parent of the servers' data directories (tmpfs: etcd's best case)")
	fs.StringVar(&f.snapshotDir, "snapshot-dir", os.TempDir(), "directory for the snapshot files (etcd's, the store's, the export; on disk: about 10 GiB each at 1M nodes)")
	fs.StringVar(&f.storeBin, "store-bin", "", "meganode-store binary (default $MEGANODE_STORE_BIN or bin/meganode-store)")
	fs.StringVar(&f.storeArgs, "store-args", "", "extra flags for meganode-store, space-separated")
	fs.Int64Var(&f.etcdQuota, "etcd-quota-backend-bytes", 64<<30, "etcd's --quota-backend-bytes, the original's and the restored one's (its 2 GiB default does not hold 1M nodes' state)")
	fs.BoolVar(&f.serverLog, "server-log", false, "show the servers' own log on stderr")
	fs.StringVar(&f.out, "out", "", "directory for results.json and summary.md")
	return cmd
}

func (f *benchMigrateFlags) validate() error {
	if f.nodes <= 0 || f.clients <= 0 || f.conns <= 0 || f.pageLimit <= 0 {
		return usagef("--nodes, --clients, --conns and --page-limit must be positive")
	}
	if f.pods < 0 || f.leases < 0 || f.etcdLeases < 0 {
		return usagef("--pods, --leases and --etcd-leases must not be negative")
	}
	if leases := f.config().Leases; f.etcdLeases > leases {
		return usagef("--etcd-leases %d: more than the %d node Leases they are attached to", f.etcdLeases, leases)
	}
	return nil
}

// config is the run the flags ask for, counts filled in.
func (f *benchMigrateFlags) config() bench.MigrateConfig {
	c := bench.MigrateConfig{Nodes: f.nodes, Pods: f.pods, Leases: f.leases, EtcdLeases: f.etcdLeases,
		Clients: f.clients, Conns: f.conns, PageLimit: f.pageLimit, DataRoot: f.dataDir, SnapshotDir: f.snapshotDir,
		StoreBin: f.storeBin, StoreArgs: strings.Fields(f.storeArgs), EtcdQuota: f.etcdQuota}
	if c.Pods == 0 {
		c.Pods = c.Nodes
	}
	if c.Leases == 0 {
		c.Leases = c.Nodes
	}
	return c
}

func runBenchMigrate(ctx context.Context, cmd *cobra.Command, f *benchMigrateFlags) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := f.config()
	cfg.Meganode, cfg.Log = self, cmd.ErrOrStderr()
	if f.serverLog {
		cfg.ServerLog = cmd.ErrOrStderr()
	}
	res, runErr := bench.RunMigrate(ctx, cfg, bench.NewMeta(append([]string{"meganode"}, os.Args[1:]...)))
	var summary bytes.Buffer
	bench.WriteMigrateSummary(&summary, res)
	fmt.Fprint(cmd.OutOrStdout(), summary.String())
	if f.out != "" {
		if err := writeMigrateOut(f.out, res, summary.Bytes()); err != nil {
			return err
		}
	}
	switch {
	case runErr != nil:
		return runErr
	case !res.Equal:
		return fmt.Errorf("the state moved etcd → store → etcd differs from the original (see the checks)")
	}
	return nil
}

// writeMigrateOut writes results.json and summary.md (the table, ready for a README) to dir.
func writeMigrateOut(dir string, res *bench.MigrateResult, summary []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, bench.ResultsFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), summary, 0o644)
}
