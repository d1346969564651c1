package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/migrate"
)

// newStoreCmd: `meganode store import|export`, moving a store's data from etcd and back to
// it with its revisions (internal/migrate; docs/design.md, "Moving data between etcd and the
// store").
func newStoreCmd() *cobra.Command {
	return group("store", "move data between etcd and meganode-store with its revisions (import, export)",
		`store converts between etcd's backend and meganode-store's snapshot, keeping every
key's create and mod revisions, versions and retained history, the current revision, the
compaction point, leases and the auth state (users, roles, permissions, enabled):

  import  an etcd snapshot file (etcdctl snapshot save, or a member's member/snap/db)
          into a store snapshot that 'meganode-store --restore-from' starts from;
  export  a running store's snapshot into an etcd snapshot file that
          'etcdutl snapshot status' reads and 'etcdutl snapshot restore' turns into an etcd member.`,
		`  meganode store import --from etcd-snapshot.db --out store.snap
  meganode store export --endpoints http://127.0.0.1:2379 --out etcd-snapshot.db`,
		newStoreImportCmd(), newStoreExportCmd(), newStoreCheckBackendCmd())
}

type storeImportFlags struct {
	from, out string
}

func (f *storeImportFlags) validate() error {
	if f.from == "" || f.out == "" {
		return usagef("--from and --out are required")
	}
	if f.from == f.out {
		return usagef("--out must not be --from")
	}
	return nil
}

func newStoreImportCmd() *cobra.Command {
	f := &storeImportFlags{}
	cmd := &cobra.Command{
		Use:   "import",
		Short: "convert an etcd snapshot (or member/snap/db) into a meganode-store snapshot for --restore-from",
		Long: `import reads an etcd 3.5/3.6 backend — the file 'etcdctl snapshot save' writes (its
SHA-256 trailer is verified) or a member's member/snap/db (read-only; a running member's is
read from a copy, so stop the member or use a saved snapshot) — and writes the store's
snapshot (MGNSNAP1) with every retained version of every key (create and mod revision,
version, lease, value, deletions), the current revision as etcd has it, the compaction
point, the leases and the auth state. Start the store from it with
'meganode-store --data-dir DIR --restore-from OUT'.

A truncated or corrupt file is refused with one line naming it, and nothing is written:
the output goes to OUT.tmp and is renamed to OUT only when complete.`,
		Example: `  etcdctl snapshot save etcd.db
  meganode store import --from etcd.db --out store.snap
  meganode-store --data-dir /var/lib/meganode --restore-from store.snap`,
		Args: noArgs,
		RunE: action(f, runStoreImport),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.from, "from", "", "etcd snapshot file or member/snap/db (required)")
	fs.StringVar(&f.out, "out", "", "the store snapshot to write (required)")
	return cmd
}

func runStoreImport(ctx context.Context, cmd *cobra.Command, f *storeImportFlags) error {
	res, err := migrate.Import(f.from, f.out, migrate.ReadOptions{Check: func(path string) error { return checkBackendIsolated(ctx, path) }})
	if err != nil {
		return err
	}
	s, e, st := res.Snapshot, res.Etcd, res.Stats
	src := "etcd backend"
	if e.StorageVersion != "" {
		src += " " + e.StorageVersion
	}
	if e.HashChecked {
		src += ", SHA-256 checked"
	}
	if e.FromCopy {
		src += ", read from a copy: a running etcd holds it, and writes during the copy can tear it; prefer etcdctl snapshot save"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "imported %s (%s): revision %d, %s, %d keys (%d live), %d versions (%d deletions), %d leases, %s\n",
		f.from, src, s.Rev, compactionText(s.Compacted), st.Keys, st.LiveKeys, st.Versions, st.Tombstones, st.Leases, authText(s.Auth))
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes) in %s; start the store with: meganode-store --data-dir DIR --restore-from %s\n",
		f.out, res.Bytes, res.Took.Round(time.Millisecond), f.out)
	return nil
}

func compactionText(c int64) string {
	if c <= 0 {
		return "never compacted"
	}
	return fmt.Sprintf("compacted at %d", c)
}

func authText(a *migrate.Auth) string {
	if a == nil {
		return "no auth state"
	}
	en := "disabled"
	if a.Enabled {
		en = "enabled"
	}
	return fmt.Sprintf("auth %s (revision %d, %d users, %d roles)", en, a.Revision, len(a.Users), len(a.Roles))
}

type storeExportFlags struct {
	endpoints, out       string
	user, password       string
	cacert, cert, key    string
	dialTimeout, timeout time.Duration
	requestTimeout       time.Duration
}

func (f *storeExportFlags) validate() error {
	if f.endpoints == "" || f.out == "" {
		return usagef("--endpoints and --out are required")
	}
	if strings.Contains(f.endpoints, ",") {
		return usagef("--endpoints: one store (a snapshot is one member's state), got %s", f.endpoints)
	}
	if (f.cert == "") != (f.key == "") {
		return usagef("--cert and --key go together")
	}
	if f.requestTimeout <= 0 {
		return usagef("--request-timeout must be positive")
	}
	return nil
}

func newStoreExportCmd() *cobra.Command {
	f := &storeExportFlags{}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "write a running store's state as an etcd snapshot file (etcdutl snapshot status/restore read it)",
		Long: `export takes the snapshot of a running meganode-store (Maintenance.Snapshot, the store's
MGNSNAP1 format, through the etcd Go client) and writes it as the file 'etcdctl snapshot save'
writes for etcd 3.6: etcd's backend (key, meta, lease, alarm, cluster, members, auth buckets,
written by etcd's own backend code) followed by its SHA-256. 'etcdutl snapshot status' reads
it and 'etcdutl snapshot restore' turns it into the data directory of an etcd member that
serves the same keys at the same create and mod revisions, versions, leases and auth state.

With auth enabled the snapshot needs root: --user root:PASSWORD (or --user root --password P).
Leases come back in etcd with their full TTL, as after an etcd restart. The output goes to
OUT.tmp and is renamed to OUT only when complete.`,
		Example: `  meganode store export --endpoints http://127.0.0.1:2379 --out etcd.db
  meganode store export --endpoints https://10.0.0.5:2379 --cacert ca.pem --cert client.pem --key client-key.pem --user root:secret --out etcd.db
  etcdutl snapshot restore etcd.db --data-dir /var/lib/etcd`,
		Args: noArgs,
		RunE: action(f, runStoreExport),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.endpoints, "endpoints", "", "the store's client URL, http(s)://HOST:PORT (required)")
	fs.StringVar(&f.out, "out", "", "the etcd snapshot file to write (required)")
	fs.StringVar(&f.user, "user", "", "user name[:password] when auth is enabled (root)")
	fs.StringVar(&f.password, "password", "", "password of --user (instead of name:password)")
	fs.StringVar(&f.cacert, "cacert", "", "CA bundle (PEM) to verify the store's certificate")
	fs.StringVar(&f.cert, "cert", "", "client certificate (PEM)")
	fs.StringVar(&f.key, "key", "", "client key (PEM)")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", 5*time.Second, "connection timeout")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 10*time.Second, "bound on each request before the snapshot (status, member list)")
	fs.DurationVar(&f.timeout, "command-timeout", 0, "bound on the whole export, snapshot stream included (0: none)")
	return cmd
}

func runStoreExport(ctx context.Context, cmd *cobra.Command, f *storeExportFlags) error {
	cfg := clientv3.Config{
		Endpoints:          []string{f.endpoints},
		DialTimeout:        f.dialTimeout,
		MaxCallRecvMsgSize: 64 << 20,
		Logger:             zap.NewNop(),
	}
	if f.user != "" {
		name, pw, ok := strings.Cut(f.user, ":")
		if !ok {
			pw = f.password
		}
		cfg.Username, cfg.Password = name, pw
	}
	u, err := url.Parse(f.endpoints)
	secure := err == nil && u.Scheme == "https"
	if secure || f.cacert != "" || f.cert != "" {
		tlsCfg, err := (transport.TLSInfo{CertFile: f.cert, KeyFile: f.key, TrustedCAFile: f.cacert}).ClientConfig()
		if err != nil {
			return err
		}
		cfg.TLS = tlsCfg
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	cfg.Context = ctx
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", f.endpoints, err)
	}
	defer cli.Close()
	res, err := migrate.Export(ctx, cli, f.out, f.requestTimeout)
	if err != nil {
		return err
	}
	s, st := res.Head, res.Stats
	fmt.Fprintf(cmd.OutOrStdout(), "exported %s: revision %d, %s, %d keys (%d live), %d versions (%d deletions), %d leases, %s\n",
		f.endpoints, s.Rev, compactionText(s.Compacted), st.Keys, st.LiveKeys, st.Versions, st.Tombstones, st.Leases, authText(s.Auth))
	if res.Write.MarkerRev > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "the store's revision %d is above its newest write (%d): a deletion of the empty key at %d carries it into etcd\n",
			s.Rev, st.MaxModRev, res.Write.MarkerRev)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes, sha256 %s) in %s; restore with: etcdutl snapshot restore %s --data-dir DIR\n",
		f.out, res.Write.Bytes, res.Write.SHA256[:16], res.Took.Round(time.Millisecond), f.out)
	return nil
}

// checkBackendIsolated runs `meganode store check-backend` (migrate.CheckBackend, bbolt's own
// check) on path in a process of its own: some damage makes bbolt crash the process that reads
// it (a panic in a goroutine of its own, or a descent without end), and that must be an error
// line of the import, not its end.
func checkBackendIsolated(ctx context.Context, path string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var errOut bytes.Buffer
	c := exec.CommandContext(ctx, self, "store", "check-backend", "--file", path)
	c.Stderr = &errOut
	if err := c.Run(); err != nil {
		why := err.Error()
		const ours = "meganode store check-backend: "
		for _, l := range strings.Split(errOut.String(), "\n") {
			if strings.HasPrefix(l, ours) {
				return errors.New(strings.TrimPrefix(l, ours))
			}
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "runtime: ") {
				why = l
				break
			}
		}
		return fmt.Errorf("corrupt (bbolt's check of it failed: %s)", why)
	}
	return nil
}

type storeCheckBackendFlags struct{ file string }

func (f *storeCheckBackendFlags) validate() error {
	if f.file == "" {
		return usagef("--file is required")
	}
	return nil
}

// newStoreCheckBackendCmd: the hidden `meganode store check-backend`, what import runs in a
// process of its own on a file without a checksum.
func newStoreCheckBackendCmd() *cobra.Command {
	f := &storeCheckBackendFlags{}
	cmd := &cobra.Command{
		Use:    "check-backend",
		Short:  "run bbolt's consistency check on an etcd backend file (import runs it in a process of its own)",
		Hidden: true,
		Long: `check-backend runs bbolt's own consistency check (every page reachable once, of a valid type,
keys in order, free pages accounted for) on a bbolt file, read-only. 'meganode store import' runs it
in a process of its own on a file without etcdctl's SHA-256 (a member's member/snap/db): some damage
makes bbolt crash the process reading it, and that process must not be the import.`,
		Example: `  meganode store check-backend --file /var/lib/etcd/member/snap/db`,
		Args:    noArgs,
		RunE: action(f, func(_ context.Context, cmd *cobra.Command, f *storeCheckBackendFlags) error {
			return migrate.CheckBackend(f.file)
		}),
	}
	cmd.Flags().StringVar(&f.file, "file", "", "the bbolt file (required)")
	return cmd
}
