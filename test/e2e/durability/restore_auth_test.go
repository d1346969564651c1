package durability

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/storeproc"
)

// userClient is a client of p authenticated as user.
func userClient(t *testing.T, p *storeproc.Proc, user, pw string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, DialTimeout: 5 * time.Second,
		Username: user, Password: pw, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("client as %s: %v", user, err)
	}
	return cli
}

// TestRestoreKeepsAuth: as etcd's snapshot holds its auth buckets, the store's Maintenance
// Snapshot carries users, roles, permissions and the enabled flag, and --restore-from brings
// them back (on disk at once: a restart after the restore keeps them).
func TestRestoreKeepsAuth(t *testing.T) {
	ctx := context.Background()
	p, err := storeproc.Start(storeproc.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	cli := client(t, p)
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "ro"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "ro", "/a/", "/a0", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "alice", "ro"); return err },
		func() error { _, err := cli.Put(ctx, "/a/1", "v"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	root := userClient(t, p, "root", "rootpw")
	rc, err := root.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snapPath := filepath.Join(t.TempDir(), "backup.snap")
	f, err := os.Create(snapPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	f.Close()
	root.Close()
	p.Stop()

	p2, err := storeproc.Start(storeproc.Options{DataDir: t.TempDir(), ExtraArgs: []string{"--restore-from", snapPath}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Stop()
	check := func(what string) {
		t.Helper()
		anon := client(t, p2)
		defer anon.Close()
		if _, err := anon.Get(ctx, "/a/1"); err == nil || err.Error() != rpctypes.ErrUserEmpty.Error() {
			t.Errorf("%s: get without a user: %v, want %v", what, err, rpctypes.ErrUserEmpty)
		}
		alice := userClient(t, p2, "alice", "alicepw")
		defer alice.Close()
		g, err := alice.Get(ctx, "/a/1")
		if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "v" {
			t.Errorf("%s: alice get /a/1: %v %v", what, g, err)
		}
		if _, err := alice.Put(ctx, "/a/1", "w"); err == nil || err.Error() != rpctypes.ErrPermissionDenied.Error() {
			t.Errorf("%s: alice put /a/1: %v, want %v", what, err, rpctypes.ErrPermissionDenied)
		}
		root := userClient(t, p2, "root", "rootpw")
		defer root.Close()
		st, err := root.AuthStatus(ctx)
		if err != nil || !st.Enabled {
			t.Errorf("%s: auth status %v %v", what, st, err)
		}
	}
	check("restore from snapshot")
	p2.Kill()
	if err := p2.Restart(); err != nil {
		t.Fatal(err)
	}
	check("restart after restore")
}
