package durability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/storeproc"
)

// A full disk is an alarm, not an exit (docs/design.md, "When a log write
// fails"): with the data dir on a 16 MiB tmpfs filled up, the store stays up,
// serves reads and watches, refuses durable writes with etcd's NOSPACE (Lock
// and Election's too, as etcd's servers answer a refused put) — and
// memory-only writes too while a write is held (they could not become visible
// before it, docs/design.md §2 "Visibility") —, takes writes again within 5 s
// of space returning, and loses no acknowledged write across a SIGKILL and restart.
func TestDiskFull(t *testing.T) {
	for _, mode := range []string{"fsync", "buffered"} {
		t.Run(mode, func(t *testing.T) { testDiskFull(t, mode) })
	}
}

func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// storeOnTmpfs starts the store with `args`, its data in <dir>/data on a fresh tmpfs of
// `size`, and a client of it; both are stopped when the test ends.
func storeOnTmpfs(t *testing.T, size string, args ...string) (dir string, p *storeproc.Proc, cli *clientv3.Client) {
	t.Helper()
	dir = mountTmpfs(t, size)
	p, err := storeproc.Start(storeproc.Options{DataDir: filepath.Join(dir, "data"), ExtraArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	cli = client(t, p)
	t.Cleanup(func() { _ = cli.Close() })
	return dir, p, cli
}

// lostWrites reads the keys under prefix and returns those whose value is not the one
// last acknowledged for them in acked.
func lostWrites(t *testing.T, cli *clientv3.Client, prefix string, acked map[string]string) []string {
	t.Helper()
	g, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, kv := range g.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	var lost []string
	for k, v := range acked {
		if have[k] != v {
			lost = append(lost, k)
		}
	}
	return lost
}

// writesResume removes `filler` and retries put until it succeeds, failing the test if
// that takes more than 5 s; it returns how long it took.
func writesResume(t *testing.T, filler string, put func() error) time.Duration {
	t.Helper()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for {
		err := put()
		if err == nil {
			return time.Since(freed)
		}
		if time.Since(freed) > 5*time.Second {
			t.Fatalf("writes not taken 5 s after space returned: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fill writes a file until the file system has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			break
		}
	}
	// The last pages, byte by byte sizes: leave nothing.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}

func isNoSpace(err error) bool {
	var ee rpctypes.EtcdError
	return errors.As(err, &ee) && ee.Code() == codes.ResourceExhausted && ee.Error() == "etcdserver: mvcc: database space exceeded"
}

func testDiskFull(t *testing.T, mode string) {
	dir, p, cli := storeOnTmpfs(t, "16m", "--durability="+mode)
	data := filepath.Join(dir, "data")
	bg := context.Background()
	value := strings.Repeat("x", 3000)
	acked := map[string]string{}
	put := func(k, v string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(bg, timeout)
		defer cancel()
		_, err := cli.Put(ctx, k, v)
		if err == nil {
			acked[k] = v
		}
		return err
	}
	for i := 0; i < 20; i++ {
		if err := put(fmt.Sprintf("/registry/pods/ns/before-%d", i), value, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithCancel(bg)
	defer wcancel()
	events := cli.Watch(wctx, "/registry/events/", clientv3.WithPrefix())
	// A lease and an election's leader, for the Lock and Election calls on the full disk.
	lease, err := cli.Grant(bg, 60)
	if err != nil {
		t.Fatal(err)
	}
	locks, elections := v3lockpb.NewLockClient(cli.ActiveConnection()), v3electionpb.NewElectionClient(cli.ActiveConnection())
	led, err := elections.Campaign(bg, &v3electionpb.CampaignRequest{Name: []byte("elect/a"), Lease: int64(lease.ID), Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	// Write until the store refuses; the write that hit the full disk waits
	// for its retry (not acknowledged: its client times out).
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		err := put(fmt.Sprintf("/registry/pods/ns/full-%d", i), value, time.Second)
		switch {
		case err == nil:
		case isNoSpace(err):
			refused = true
		case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "context deadline exceeded"):
		default:
			t.Fatalf("put on a full disk: want NOSPACE, got %v", err)
		}
	}
	if !refused {
		t.Fatalf("200 puts on a full disk, none refused with NOSPACE")
	}
	al, err := cli.AlarmList(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(al.Alarms) != 1 || al.Alarms[0].Alarm != etcdserverpb.AlarmType_NOSPACE {
		t.Fatalf("alarms on a full disk: %v", al.Alarms)
	}
	if !strings.Contains(p.Tail(), filepath.Join(data, "registry+pods+.wal")) {
		t.Fatalf("the error log does not name the log file:\n%s", p.Tail())
	}
	// Durable writes of every kind are refused, and memory-only ones behind
	// the held write; reads and watches are served.
	if _, err := cli.Delete(bg, "/registry/pods/ns/before-0"); !isNoSpace(err) {
		t.Fatalf("delete on a full disk: want NOSPACE, got %v", err)
	}
	if _, err := cli.Txn(bg).Then(clientv3.OpPut("/registry/configmaps/ns/c", "v")).Commit(); !isNoSpace(err) {
		t.Fatalf("txn on a full disk: want NOSPACE, got %v", err)
	}
	// Lock and Election write keys: refused at once, as etcd's servers answer a put refused
	// with NOSPACE (through their in-process client: code Unknown), instead of waiting.
	recipes := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Lock", func(ctx context.Context) error {
			_, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lock/a"), Lease: int64(lease.ID)})
			return err
		}},
		{"Lock with a new session", func(ctx context.Context) error {
			_, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lock/a")})
			return err
		}},
		{"Campaign", func(ctx context.Context) error {
			_, err := elections.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("elect/b"), Lease: int64(lease.ID), Value: []byte("v")})
			return err
		}},
		{"Proclaim", func(ctx context.Context) error {
			_, err := elections.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: led.Leader, Value: []byte("v2")})
			return err
		}},
	}
	for _, r := range recipes {
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		t0 := time.Now()
		err := r.call(ctx)
		cancel()
		if st := status.Convert(err); err == nil || st.Code() != codes.Unknown || st.Message() != "etcdserver: mvcc: database space exceeded" {
			t.Errorf("%s on a full disk: want Unknown %q, got %v after %v", r.what, "etcdserver: mvcc: database space exceeded", err, time.Since(t0))
		} else if d := time.Since(t0); d > time.Second {
			t.Errorf("%s on a full disk: refused after %v, want at once", r.what, d)
		}
	}
	if lr, err := elections.Leader(bg, &v3electionpb.LeaderRequest{Name: []byte("elect/a")}); err != nil || string(lr.Kv.Value) != "v1" {
		t.Errorf("Leader on a full disk: %v %v", lr, err)
	}
	g, err := cli.Get(bg, "/registry/pods/ns/before-", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 20 {
		t.Fatalf("read on a full disk: %v, count %v", err, g)
	}
	if err := put("/registry/events/ns/e1", "ev", 2*time.Second); !isNoSpace(err) {
		t.Fatalf("memory-only write behind a held write: want NOSPACE, got %v", err)
	}
	select {
	case r := <-events:
		t.Fatalf("watch on a full disk: an event behind the held write: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}

	// Room again: writes are taken within 5 s, without a restart.
	took := writesResume(t, filler, func() error { return put("/registry/pods/ns/after", value, time.Second) })
	t.Logf("writes taken again %v after space returned", took.Round(time.Millisecond))
	if al, err := cli.AlarmList(bg); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms after space returned: %v %v", al, err)
	}
	for i := 0; i < 20; i++ {
		if err := put(fmt.Sprintf("/registry/pods/ns/after-%d", i), value, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing acknowledged is lost across a crash.
	wcancel()
	cli.Close()
	cli = killAndRestart(t, p)
	defer cli.Close()
	lost := lostWrites(t, cli, "/registry/pods/", acked)
	for _, k := range lost {
		t.Errorf("acknowledged %s lost after restart", k)
	}
	t.Logf("%d acknowledged writes checked after SIGKILL and restart, %d lost", len(acked), len(lost))
}
