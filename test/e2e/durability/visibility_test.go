package durability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A write is visible only once it is durable (docs/design.md §2,
// "Visibility"): a write held because the disk is full — committed in memory,
// its log write failing and retried — must not be read, counted, reported in
// a header or delivered to a watcher, because a SIGKILL before the disk has
// room again loses it. After the kill it is gone, and nobody saw it. A write
// to a memory-only prefix queued behind it is refused (it could not become
// visible before the held one). Fails on a store that publishes at commit.
func TestHeldWriteIsInvisibleUntilDurable(t *testing.T) {
	for _, mode := range []string{"fsync", "buffered"} {
		t.Run(mode, func(t *testing.T) { testHeldWriteInvisible(t, mode) })
	}
}

func testHeldWriteInvisible(t *testing.T, mode string) {
	dir, p, cli := storeOnTmpfs(t, "16m", "--durability="+mode)
	bg := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := cli.Put(bg, fmt.Sprintf("/registry/pods/ns/before-%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := cli.Get(bg, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	before := g.Header.Revision
	wctx, wcancel := context.WithCancel(bg)
	defer wcancel()
	pods := cli.Watch(wctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(before+1))
	events := cli.Watch(wctx, "/registry/events/", clientv3.WithPrefix(), clientv3.WithRev(before+1))

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	held := holdAWrite(t, cli)
	// Invisible to reads: absent, not counted, and no header names its revision.
	g, err = cli.Get(bg, held)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 0 {
		t.Fatalf("held write %s visible to a read at revision %d (mod revision %d)", held, g.Header.Revision, g.Kvs[0].ModRevision)
	}
	heldFrom := g.Header.Revision
	if _, err := cli.Get(bg, held, clientv3.WithRev(heldFrom+1)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("read at revision %d (the held write's): want %v, got %v", heldFrom+1, rpctypes.ErrFutureRev, err)
	}
	if g, err := cli.Get(bg, held, clientv3.WithSerializable()); err != nil || len(g.Kvs) != 0 {
		t.Fatalf("held write %s visible to a serializable read: %v %v", held, g, err)
	}
	// A memory-only write behind it is refused, not served or held.
	if _, err := cli.Put(bg, "/registry/events/ns/e1", "ev"); !isNoSpace(err) {
		t.Fatalf("memory-only put behind a held write: want NOSPACE, got %v", err)
	}
	// Invisible to watchers.
	if rev, ok := deliveredWithin(pods, held, 1500*time.Millisecond); ok {
		t.Fatalf("held write %s delivered to a watcher at revision %d before it is durable", held, rev)
	}
	select {
	case r := <-events:
		t.Fatalf("event behind a held write delivered: %+v", r.Events)
	default:
	}

	// SIGKILL while held: the write is lost, and nobody saw it. The disk gets
	// room only after the kill (so no retry can land it first).
	wcancel()
	cli.Close()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	cli = client(t, p)
	defer cli.Close()
	g, err = cli.Get(bg, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// The held write is gone (never written); everything acknowledged is there.
	var n int
	fmt.Sscanf(held, "/registry/pods/ns/held-%d", &n)
	if len(g.Kvs) != 5+n {
		t.Fatalf("after the restart: %d pods, want the %d acknowledged", len(g.Kvs), 5+n)
	}
	for _, kv := range g.Kvs {
		if string(kv.Key) == held {
			t.Fatalf("the held write survived the kill (it was never written): %s", kv.Key)
		}
	}
	t.Logf("held %s (invisible at revision %d) lost by the kill, seen by nobody", held, heldFrom)
}

// holdAWrite puts to /registry/pods/ on a full disk until a put is held (its
// log write failed: committed, never answered) and returns its key. Puts that
// still found room in the log's last page are acknowledged on the way.
func holdAWrite(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	value := strings.Repeat("x", 3000)
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("/registry/pods/ns/held-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, k, value)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "context deadline exceeded"):
			return k
		case isNoSpace(err):
			t.Fatalf("put %s refused before any write was held", k)
		default:
			t.Fatalf("put on a full disk: %v", err)
		}
	}
	t.Fatal("50 puts on a full disk, none held")
	return ""
}

// deliveredWithin reads the watch for up to d and returns the revision of the first event of
// key (events of other keys, acknowledged before, may come); ok false if none came.
func deliveredWithin(wch clientv3.WatchChan, key string, d time.Duration) (rev int64, ok bool) {
	deadline := time.After(d)
	for {
		select {
		case r := <-wch:
			for _, e := range r.Events {
				if string(e.Kv.Key) == key {
					return e.Kv.ModRevision, true
				}
			}
		case <-deadline:
			return 0, false
		}
	}
}

// The same held write becomes visible — to reads and to a watcher — once the
// disk has room again and its retry wrote it.
func TestHeldWriteBecomesVisibleWhenWritten(t *testing.T) {
	dir, _, cli := storeOnTmpfs(t, "16m", "--durability=fsync")
	bg := context.Background()
	wctx, wcancel := context.WithCancel(bg)
	defer wcancel()
	pods := cli.Watch(wctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-pods
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	held := holdAWrite(t, cli)
	if rev, ok := deliveredWithin(pods, held, time.Second); ok {
		t.Fatalf("held write %s delivered to a watcher at revision %d before it is durable", held, rev)
	}
	if g, err := cli.Get(bg, held); err != nil || len(g.Kvs) != 0 {
		t.Fatalf("held write visible to a read: %v %v", g, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, ok := deliveredWithin(pods, held, 5*time.Second); !ok {
		t.Fatalf("%s, now durable, was never delivered", held)
	}
	if g, err := cli.Get(bg, held); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("durable write not visible: %v %v", g, err)
	}
}
