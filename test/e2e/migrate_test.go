package e2e

// Issue 38: data moved from etcd into meganode-store with its revisions, and back out.
// A real embedded etcd gets keys with history, deletes, a multi-op transaction, leases,
// a compaction and users/roles/permissions with auth enabled; its snapshot (`etcdctl
// snapshot save`'s form) goes through `meganode store import` into the real store started
// with --restore-from (and to --restore-from as it is); the store's export (`meganode store export`) goes through etcd's own
// `etcdutl snapshot status` and `snapshot restore` (go.etcd.io/etcd/etcdutl/v3/snapshot) into
// a real etcd. Each server answers the same Range results at every revision from the
// compaction on, refuses the same compacted and future revisions, has the same HashKV, leases
// and auth state. Truncated and corrupt files are refused with one line naming them.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	clisnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/migrate"
	"github.com/meganode/meganode/internal/storeproc"
	"github.com/meganode/meganode/internal/testcerts"
)

const migrateRootPW = "root-pw"

// migrateExpect is what the source etcd answered, for every later server to answer again.
type migrateExpect struct {
	rev, compacted int64
	ranges         map[int64][]*mvccpb.KeyValue // every key at each revision from the compaction on
	hashes         map[int64]uint32             // HashKV at each revision from the compaction on
	leases         map[int64][]string           // lease ID → granted TTL and attached keys, as text
	authEnabled    bool
	authRev        uint64
	users          map[string][]string
	roles          map[string][]*authpb.Permission
	liveKeys       int
	noPasswordErr  string // what a password login of the user without one answers
}

// meganodeBin finds bin/meganode ($MEGANODE_BIN, else the repository's bin/), which `make test`
// builds before the tests.
func meganodeBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("MEGANODE_BIN"); b != "" {
		return b
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bin", "meganode")); err == nil {
			return filepath.Join(d, "bin", "meganode")
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == filepath.Dir(d) {
			break
		}
	}
	t.Fatal("bin/meganode not found: run `make meganode` or set MEGANODE_BIN")
	return ""
}

func runMeganode(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(meganodeBin(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("meganode %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

func migrateClient(t *testing.T, endpoint, user, pw string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: user, Password: pw,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	must(t, "client "+endpoint, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// migratePopulate writes the source state; it returns the compaction revision.
func migratePopulate(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	put := func(k, v string, opts ...clientv3.OpOption) int64 {
		r, err := cli.Put(ctx, k, v, opts...)
		must(t, "put "+k, err)
		return r.Header.Revision
	}
	del := func(k string) {
		_, err := cli.Delete(ctx, k)
		must(t, "delete "+k, err)
	}
	put("a", "v1")
	put("b", "x")
	put("a", "v2")
	put("c", "1")
	del("c")
	put("d", "")
	// One revision, several changes (sub-revisions 0, 1, 2).
	_, err := cli.Txn(ctx).Then(clientv3.OpPut("t1", "one"), clientv3.OpPut("t2", "two"), clientv3.OpDelete("b")).Commit()
	must(t, "txn", err)
	put("a", "v3")
	put("c", "2") // a second generation
	put("\x00\xffbin", "\x00\x01\x02\xff")
	l, err := cli.Grant(ctx, 600)
	must(t, "grant", err)
	put("/leased/1", "l1", clientv3.WithLease(l.ID))
	put("/leased/2", "l2", clientv3.WithLease(l.ID))
	_, err = cli.Grant(ctx, 3600) // a lease without keys
	must(t, "grant", err)
	for i := range 5 {
		put("/registry/pods/ns/p"+fmt.Sprint(i%3), strings.Repeat("pod", i+1))
	}
	compactAt := put("a", "v4")
	_, err = cli.Compact(ctx, compactAt)
	must(t, "compact", err)
	put("a", "v5")
	del("d")
	put("/a/x", "readable")
	put("/a/y", "readable too")
	put("c", "3")
	return compactAt
}

// migrateAuth sets up users, roles and permissions and enables auth.
func migrateAuth(t *testing.T, ctx context.Context, cli *clientv3.Client) {
	t.Helper()
	steps := []struct {
		what string
		do   func() error
	}{
		{"role root", func() error { _, err := cli.RoleAdd(ctx, "root"); return err }},
		{"user root", func() error { _, err := cli.UserAdd(ctx, "root", migrateRootPW); return err }},
		{"root role", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"role reader", func() error { _, err := cli.RoleAdd(ctx, "reader"); return err }},
		{"reader perm", func() error {
			_, err := cli.RoleGrantPermission(ctx, "reader", "/a/", clientv3.GetPrefixRangeEnd("/a/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		}},
		{"role writer", func() error { _, err := cli.RoleAdd(ctx, "writer"); return err }},
		{"writer perm", func() error {
			_, err := cli.RoleGrantPermission(ctx, "writer", "t1", "", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"writer perm 2", func() error {
			_, err := cli.RoleGrantPermission(ctx, "writer", "/registry/", "\x00", clientv3.PermissionType(clientv3.PermWrite))
			return err
		}},
		{"user alice", func() error { _, err := cli.UserAdd(ctx, "alice", "alice-pw"); return err }},
		{"alice reader", func() error { _, err := cli.UserGrantRole(ctx, "alice", "reader"); return err }},
		{"alice writer", func() error { _, err := cli.UserGrantRole(ctx, "alice", "writer"); return err }},
		{"user svc", func() error {
			_, err := cli.UserAddWithOptions(ctx, "svc", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		}},
		{"svc reader", func() error { _, err := cli.UserGrantRole(ctx, "svc", "reader"); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		must(t, s.what, s.do())
	}
}

// migrateRecord reads everything the comparison needs from a server (root's client).
func migrateRecord(t *testing.T, ctx context.Context, cli *clientv3.Client, compacted int64) *migrateExpect {
	t.Helper()
	e := &migrateExpect{compacted: compacted, ranges: map[int64][]*mvccpb.KeyValue{}, leases: map[int64][]string{},
		users: map[string][]string{}, roles: map[string][]*authpb.Permission{}}
	r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	must(t, "get all", err)
	e.rev, e.liveKeys = r.Header.Revision, len(r.Kvs)
	for rev := compacted; rev <= e.rev; rev++ {
		r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
		must(t, fmt.Sprintf("get all at %d", rev), err)
		e.ranges[rev] = r.Kvs
	}
	eps := cli.Endpoints()
	e.hashes = map[int64]uint32{}
	for rev := compacted; rev <= e.rev; rev++ {
		h, err := cli.HashKV(ctx, eps[0], rev)
		must(t, fmt.Sprintf("hashkv at %d", rev), err)
		e.hashes[rev] = h.Hash
	}
	ls, err := cli.Leases(ctx)
	must(t, "leases", err)
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		must(t, "lease ttl", err)
		if ttl.TTL <= 0 || ttl.TTL > ttl.GrantedTTL {
			t.Errorf("lease %x: TTL %d of %d", l.ID, ttl.TTL, ttl.GrantedTTL)
		}
		desc := []string{fmt.Sprint("granted ", ttl.GrantedTTL)}
		for _, k := range ttl.Keys {
			desc = append(desc, string(k))
		}
		sort.Strings(desc[1:])
		e.leases[int64(l.ID)] = desc
	}
	as, err := cli.AuthStatus(ctx)
	must(t, "auth status", err)
	e.authEnabled, e.authRev = as.Enabled, as.AuthRevision
	ul, err := cli.UserList(ctx)
	must(t, "user list", err)
	for _, u := range ul.Users {
		g, err := cli.UserGet(ctx, u)
		must(t, "user get "+u, err)
		e.users[u] = g.Roles
	}
	_, err = clientv3.New(clientv3.Config{Endpoints: eps, Username: "svc", Password: "x", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		t.Fatalf("svc (no password) logged in with a password")
	}
	e.noPasswordErr = err.Error()
	rl, err := cli.RoleList(ctx)
	must(t, "role list", err)
	for _, name := range rl.Roles {
		g, err := cli.RoleGet(ctx, name)
		must(t, "role get "+name, err)
		e.roles[name] = g.Perm
	}
	return e
}

// migrateCompare checks a server against what the source etcd answered.
func migrateCompare(t *testing.T, ctx context.Context, name string, cli *clientv3.Client, want *migrateExpect) *migrateExpect {
	t.Helper()
	got := migrateRecord(t, ctx, cli, want.compacted)
	if got.rev != want.rev {
		t.Errorf("%s: revision %d, want %d", name, got.rev, want.rev)
	}
	for rev := want.compacted; rev <= want.rev; rev++ {
		g, w := got.ranges[rev], want.ranges[rev]
		if len(g) != len(w) {
			t.Errorf("%s: at revision %d %d keys, want %d", name, rev, len(g), len(w))
			continue
		}
		for i := range w {
			if !reflect.DeepEqual(g[i], w[i]) {
				t.Errorf("%s: at revision %d key %q: got %+v, want %+v", name, rev, w[i].Key, g[i], w[i])
			}
		}
	}
	// Below the compaction: refused as compacted; past the revision: a future revision.
	for _, rev := range []int64{1, want.compacted - 1} {
		_, err := cli.Get(ctx, "a", clientv3.WithRev(rev))
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("%s: get at compacted revision %d: %v, want %v", name, rev, err, rpctypes.ErrCompacted)
		}
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(want.rev+1)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Errorf("%s: get at revision %d: %v, want %v", name, want.rev+1, err, rpctypes.ErrFutureRev)
	}
	// At the compaction revision itself a running etcd answers the hash it took while compacting
	// (from the compaction before), and a restarted or restored one hashes the kept versions: the
	// sources differ there by construction; the two restored servers are compared at it below.
	for rev := want.compacted + 1; rev <= want.rev; rev++ {
		if got.hashes[rev] != want.hashes[rev] {
			t.Errorf("%s: HashKV at %d = %d, want etcd's %d", name, rev, got.hashes[rev], want.hashes[rev])
		}
	}
	if !reflect.DeepEqual(got.leases, want.leases) {
		t.Errorf("%s: leases %v, want %v", name, got.leases, want.leases)
	}
	if got.authEnabled != want.authEnabled || got.authRev != want.authRev {
		t.Errorf("%s: auth enabled %v revision %d, want %v %d", name, got.authEnabled, got.authRev, want.authEnabled, want.authRev)
	}
	if !reflect.DeepEqual(got.users, want.users) {
		t.Errorf("%s: users %v, want %v", name, got.users, want.users)
	}
	if !reflect.DeepEqual(got.roles, want.roles) {
		t.Errorf("%s: roles %v, want %v", name, got.roles, want.roles)
	}
	// The users work: alice's password and permissions came along, svc still has no password.
	ep := cli.Endpoints()[0]
	alice := migrateClient(t, ep, "alice", "alice-pw")
	if r, err := alice.Get(ctx, "/a/", clientv3.WithPrefix()); err != nil || len(r.Kvs) != 2 {
		t.Errorf("%s: alice reads /a/: %v", name, err)
	}
	if _, err := alice.Put(ctx, "/a/x", "no"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("%s: alice writes /a/x: %v, want %v", name, err, rpctypes.ErrPermissionDenied)
	}
	if _, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Username: "alice", Password: "wrong",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("%s: alice with a wrong password: %v, want %v", name, err, rpctypes.ErrAuthFailed)
	}
	if got.noPasswordErr != want.noPasswordErr {
		t.Errorf("%s: svc (no password) logging in with a password: %s, want %s", name, got.noPasswordErr, want.noPasswordErr)
	}
	return got
}

// migrateRestoreEtcd runs etcdutl's snapshot status and restore on an etcd snapshot file and
// starts an etcd on the restored data dir.
func migrateRestoreEtcd(t *testing.T, file string) (*etcdref.Server, snapshot.Status) {
	t.Helper()
	lg := zap.NewNop()
	st, err := snapshot.NewV3(lg).Status(file)
	must(t, "etcdutl snapshot status "+file, err)
	dir, err := os.MkdirTemp(shmDir(), "migrate-restored-")
	must(t, "temp dir", err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "etcd")
	port, err := storeproc.FreePort()
	must(t, "port", err)
	peer := fmt.Sprintf("http://127.0.0.1:%d", port)
	err = snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{SnapshotPath: file, Name: "etcdref", OutputDataDir: data,
		PeerURLs: []string{peer}, InitialCluster: "etcdref=" + peer, InitialClusterToken: "etcd-cluster"})
	must(t, "etcdutl snapshot restore "+file, err)
	srv, err := etcdref.Start(etcdref.Options{DataDir: data, PeerPort: port, LogLevel: "fatal"})
	must(t, "etcd on the restored data dir", err)
	t.Cleanup(srv.Close)
	return srv, st
}

func TestMigrateEtcdToStoreAndBack(t *testing.T) {
	if useEtcdForMeganode() {
		t.Skip("the real store binary is the subject (MEGANODE_E2E_TARGET=etcd)")
	}
	storeBin, err := storeproc.FindBin()
	must(t, "store binary", err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	work := t.TempDir()
	lg := zap.NewNop()

	// The source: a real etcd with history, a compaction, leases and auth.
	srcDir, err := os.MkdirTemp(shmDir(), "migrate-etcd-")
	must(t, "temp dir", err)
	defer os.RemoveAll(srcDir)
	src, err := etcdref.Start(etcdref.Options{DataDir: srcDir, LogLevel: "fatal"})
	must(t, "source etcd", err)
	srcOpen := true
	defer func() {
		if srcOpen {
			src.Etcd.Close()
		}
	}()
	plain := migrateClient(t, src.Endpoint, "", "")
	compactAt := migratePopulate(t, ctx, plain)
	migrateAuth(t, ctx, plain)
	root := migrateClient(t, src.Endpoint, "root", migrateRootPW)
	want := migrateRecord(t, ctx, root, compactAt)
	if len(want.leases) != 2 || len(want.users) != 3 || !want.authEnabled {
		t.Fatalf("source state: %d leases, %d users, auth %v", len(want.leases), len(want.users), want.authEnabled)
	}
	etcdSnap := filepath.Join(work, "etcd.db")
	_, err = clisnapshot.SaveWithVersion(ctx, lg, clientv3.Config{Endpoints: []string{src.Endpoint}, Username: "root",
		Password: migrateRootPW, DialTimeout: 5 * time.Second, Logger: lg}, etcdSnap)
	must(t, "etcdctl snapshot save", err)
	srcStatus, err := snapshot.NewV3(lg).Status(etcdSnap)
	must(t, "etcdutl snapshot status of the source", err)
	src.Etcd.Close()
	srcOpen = false

	// In: the saved snapshot, and the member's own member/snap/db, give the same store snapshot.
	storeSnap := filepath.Join(work, "store.snap")
	code, out, errOut := runMeganode(t, "store", "import", "--from", etcdSnap, "--out", storeSnap)
	if code != 0 {
		t.Fatalf("meganode store import: exit %d: %s", code, errOut)
	}
	t.Logf("import: %s", strings.TrimSpace(out))
	fromMember := filepath.Join(work, "store-member.snap")
	if code, _, errOut := runMeganode(t, "store", "import", "--from", filepath.Join(srcDir, "member", "snap", "db"), "--out", fromMember); code != 0 {
		t.Fatalf("meganode store import of member/snap/db: exit %d: %s", code, errOut)
	}
	a, _ := os.ReadFile(storeSnap)
	bm, _ := os.ReadFile(fromMember)
	if !bytes.Equal(a, bm) {
		t.Errorf("the saved snapshot and member/snap/db imported differently (%d and %d bytes)", len(a), len(bm))
	}
	if s, err := migrate.ReadSnapshot(bytes.NewReader(a)); err != nil {
		t.Fatalf("store snapshot: %v", err)
	} else if s.Rev != want.rev || s.Compacted != compactAt {
		t.Fatalf("store snapshot: revision %d compacted %d, want %d %d", s.Rev, s.Compacted, want.rev, compactAt)
	}

	storeDir, err := os.MkdirTemp(shmDir(), "migrate-store-")
	must(t, "temp dir", err)
	defer os.RemoveAll(storeDir)
	// Every prefix durable, so that the restart below keeps every prefix's history (the
	// memory-only defaults, events and leases, lose it at a restart: docs/design.md §5).
	durable := []string{"--durability-prefix", "/registry/events/=buffered,/registry/leases/=buffered"}
	so := storeproc.Options{Bin: storeBin, DataDir: storeDir, ExtraArgs: append([]string{"--restore-from", storeSnap}, durable...)}
	if os.Getenv("MEGANODE_STORE_LOG") == "1" {
		so.Stderr = os.Stderr
	}
	proc, err := storeproc.Start(so)
	must(t, "meganode-store --restore-from", err)
	defer func() { proc.Stop() }()
	storeCli := migrateClient(t, proc.Endpoint, "root", migrateRootPW)
	storeGot := migrateCompare(t, ctx, "meganode-store restored from etcd", storeCli, want)

	// The store takes etcd's snapshot itself: --restore-from converts a bbolt file with
	// `meganode store import` (beside the store binary, or $MEGANODE_BIN). Default durability:
	// right after a restore the memory-only prefixes serve the snapshot's history too.
	t.Setenv("MEGANODE_BIN", meganodeBin(t))
	directDir, err := os.MkdirTemp(shmDir(), "migrate-store-direct-")
	must(t, "temp dir", err)
	defer os.RemoveAll(directDir)
	direct, err := storeproc.Start(storeproc.Options{Bin: storeBin, DataDir: directDir, ExtraArgs: []string{"--restore-from", etcdSnap}})
	must(t, "meganode-store --restore-from etcd's snapshot", err)
	migrateCompare(t, ctx, "meganode-store restored from etcd's snapshot directly", migrateClient(t, direct.Endpoint, "root", migrateRootPW), want)
	must(t, "stop", direct.Stop())

	// Out: the store's export, read by etcdutl and restored into a real etcd.
	exported := filepath.Join(work, "export.db")
	code, out, errOut = runMeganode(t, "store", "export", "--endpoints", proc.URL, "--user", "root:"+migrateRootPW, "--out", exported)
	if code != 0 {
		t.Fatalf("meganode store export: exit %d: %s", code, errOut)
	}
	t.Logf("export: %s", strings.TrimSpace(out))
	back, st := migrateRestoreEtcd(t, exported)
	if st.Revision != want.rev || st.TotalKey != srcStatus.TotalKey || st.TotalKey != want.liveKeys || st.Version != "3.6.0" || st.Hash == 0 {
		t.Errorf("etcdutl snapshot status of the export: %+v; the source's: %+v (revision %d, %d keys)", st, srcStatus, want.rev, want.liveKeys)
	}
	backCli := migrateClient(t, back.Endpoint, "root", migrateRootPW)
	backGot := migrateCompare(t, ctx, "etcd restored from the store's export", backCli, want)
	if a, b := storeGot.hashes[compactAt], backGot.hashes[compactAt]; a != b {
		t.Errorf("HashKV at the compaction revision %d: the store %d, etcd restored from its export %d", compactAt, a, b)
	}

	// A store restarted resumes above its revision floor, with no write at that revision: the
	// export carries the revision (etcd's current revision is its highest key revision), and
	// importing the export gives the store's state again.
	must(t, "stop the store", proc.Stop())
	must(t, "meganode-store restart", proc.RestartWith(durable))
	storeCli = migrateClient(t, proc.Endpoint, "root", migrateRootPW)
	h, err := storeCli.HashKV(ctx, proc.Endpoint, 0)
	must(t, "hashkv after restart", err)
	floorRev, storeCompacted := h.Header.Revision, h.CompactRevision
	if storeCompacted != compactAt {
		// The restoring start writes the snapshot's compaction point to its meta log, as a compaction would.
		t.Errorf("after a restart the store reports compaction %d, restored with %d", storeCompacted, compactAt)
	}
	exported2 := filepath.Join(work, "export2.db")
	if code, _, errOut := runMeganode(t, "store", "export", "--endpoints", proc.URL, "--user", "root:"+migrateRootPW, "--out", exported2); code != 0 {
		t.Fatalf("meganode store export after a restart: exit %d: %s", code, errOut)
	}
	back2, st2 := migrateRestoreEtcd(t, exported2)
	r2, err := migrateClient(t, back2.Endpoint, "root", migrateRootPW).Get(ctx, "a")
	must(t, "get from etcd", err)
	if r2.Header.Revision != floorRev || st2.TotalKey != want.liveKeys {
		t.Errorf("after a store restart (revision %d, newest write %d): etcd restored from the export is at revision %d with %d keys",
			floorRev, want.rev, r2.Header.Revision, st2.TotalKey)
	}
	for _, kv := range want.ranges[want.rev] {
		if string(kv.Key) == "a" && (len(r2.Kvs) != 1 || !reflect.DeepEqual(r2.Kvs[0], kv)) {
			t.Errorf("key a after the round trip: %v, want %v", r2.Kvs, kv)
		}
	}
	again := filepath.Join(work, "again.snap")
	if code, _, errOut := runMeganode(t, "store", "import", "--from", exported2, "--out", again); code != 0 {
		t.Fatalf("meganode store import of the export: exit %d: %s", code, errOut)
	}
	s, err := readSnapFile(again)
	must(t, "read "+again, err)
	orig, err := readSnapFile(storeSnap)
	must(t, "read "+storeSnap, err)
	if s.Rev != floorRev || s.Compacted != max(storeCompacted, migrate.NeverCompacted) || !reflect.DeepEqual(s.Keys, orig.Keys) || !reflect.DeepEqual(s.Auth, orig.Auth) {
		t.Errorf("the export imported again: revision %d compacted %d, want %d %d; keys equal %v, auth equal %v",
			s.Rev, s.Compacted, floorRev, storeCompacted, reflect.DeepEqual(s.Keys, orig.Keys), reflect.DeepEqual(s.Auth, orig.Auth))
	}

	// Truncated and corrupt files: one line naming the file, exit 1, nothing written.
	whole, err := os.ReadFile(etcdSnap)
	must(t, "read snapshot", err)
	member, err := os.ReadFile(filepath.Join(srcDir, "member", "snap", "db"))
	must(t, "read member db", err)
	bad := map[string][]byte{
		"truncated.db": whole[:len(whole)/2],
		// member/snap/db carries no checksum: what bbolt can tell is a file shorter than its
		// pages (the saved snapshot's size is the member's high-water mark) and broken pages.
		"truncated-member.db": member[:(len(whole)-32)/2],
		"corrupt.db":          flipped(whole, len(whole)/2, 64),
		"corrupt-member.db":   pageHeadersFlipped(member, len(whole)-32),
		"not-etcd.db":         bytes.Repeat([]byte("not a bbolt file\n"), 100),
	}
	for name, content := range bad {
		in := filepath.Join(work, name)
		must(t, "write "+name, os.WriteFile(in, content, 0o600))
		outFile := filepath.Join(work, name+".snap")
		code, stdout, stderr := runMeganode(t, "store", "import", "--from", in, "--out", outFile)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, in) {
			t.Errorf("import of %s: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the file", name, code, stdout, stderr)
		}
		for _, p := range []string{outFile, outFile + ".tmp"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("import of %s left %s", name, p)
			}
		}
		t.Logf("%s: %s", name, strings.TrimSpace(stderr))
		// Given to the store directly: it does not start, says why naming the file, and writes
		// nothing into its data dir.
		dataDir := filepath.Join(work, name+".data")
		_, err := storeproc.Start(storeproc.Options{Bin: storeBin, DataDir: dataDir, ExtraArgs: []string{"--restore-from", in}})
		if err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("meganode-store --restore-from %s: %v; want a refusal naming the file", name, err)
		}
		entries, _ := os.ReadDir(dataDir)
		for _, e := range entries {
			if e.Name() != "LOCK" {
				t.Errorf("meganode-store --restore-from %s left %s in its data dir", name, e.Name())
			}
		}
	}
}

// flipped is a copy of b with n bytes from off inverted.
func flipped(b []byte, off, n int) []byte {
	c := bytes.Clone(b)
	for i := off; i < off+n && i < len(c); i++ {
		c[i] ^= 0xff
	}
	return c
}

// pageHeadersFlipped is a copy of a bbolt file with the 16-byte header of every page after the
// two meta pages, up to used bytes, inverted.
func pageHeadersFlipped(b []byte, used int) []byte {
	c := bytes.Clone(b)
	for off := 2 * 4096; off+16 <= used; off += 4096 {
		c = flipped(c, off, 16)
	}
	return c
}

func readSnapFile(path string) (*migrate.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return migrate.ReadSnapshot(f)
}

// The export over mutual TLS, as a production store serves (deploy/README.md's command).
func TestMigrateExportTLS(t *testing.T) {
	if useEtcdForMeganode() {
		t.Skip("the real store binary is the subject (MEGANODE_E2E_TARGET=etcd)")
	}
	work := t.TempDir()
	certs, err := testcerts.Generate(filepath.Join(work, "certs"))
	must(t, "certificates", err)
	tg, err := startServer(kindMeganode, serverOpts{Certs: &certs, ClientCertAuth: true, ClientTLS: mustClientTLS(t, certs)})
	must(t, "store with mTLS", err)
	defer tg.Close()
	ctx := ctxT(t)
	for i := range 3 {
		_, err := tg.Cli.Put(ctx, "/registry/k", fmt.Sprint(i))
		must(t, "put", err)
	}
	out := filepath.Join(work, "etcd.db")
	url := "https://" + tg.Endpoint
	if code, _, errOut := runMeganode(t, "store", "export", "--endpoints", url, "--request-timeout", "2s", "--out", out); code != 1 || !strings.Contains(errOut, url) {
		t.Errorf("export without a client certificate: exit %d, %q", code, errOut)
	}
	code, stdout, errOut := runMeganode(t, "store", "export", "--endpoints", url, "--cacert", certs.CAFile,
		"--cert", certs.ClientCert, "--key", certs.ClientKey, "--out", out)
	if code != 0 {
		t.Fatalf("export over mTLS: exit %d: %s", code, errOut)
	}
	st, err := snapshot.NewV3(zap.NewNop()).Status(out)
	if err != nil || st.Revision != 4 || st.TotalKey != 1 {
		t.Errorf("etcdutl snapshot status: %+v %v (%s)", st, err, stdout)
	}
}

func mustClientTLS(t *testing.T, p testcerts.Paths) *tls.Config {
	t.Helper()
	c, err := p.ClientTLS(true)
	must(t, "client TLS", err)
	return c
}
