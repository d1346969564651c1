package durability

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/storeproc"
)

func writeKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) []int64 {
	t.Helper()
	var revs []int64
	for i := 0; i < n; i++ {
		r, err := cli.Put(context.Background(), fmt.Sprintf("%sns/k%03d", prefix, i), strings.Repeat("v", 100+i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Header.Revision)
	}
	return revs
}

func podsLog(dir string) string { return filepath.Join(dir, "registry+pods+.wal") }

// storeWithPodsLog runs a store, writes 50 pods and stops it cleanly: the data
// dir and the bytes of its pods log, for a test to damage.
func storeWithPodsLog(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	p, err := storeproc.Start(storeproc.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cli := client(t, p)
	writeKeys(t, cli, "/registry/pods/", 50)
	cli.Close()
	p.Stop()
	buf, err := os.ReadFile(podsLog(dir))
	if err != nil {
		t.Fatal(err)
	}
	return dir, buf
}

// A log whose last record was half written (or flipped) is cut there: the store
// starts, reports the cut, and keeps every record before it.
func TestTornTailIsCut(t *testing.T) {
	for _, damage := range []string{"truncate", "bitflip-last"} {
		t.Run(damage, func(t *testing.T) {
			dir, buf := storeWithPodsLog(t)
			switch damage {
			case "truncate":
				buf = buf[:len(buf)-37]
			case "bitflip-last":
				buf[len(buf)-3] ^= 0x40
			}
			if err := os.WriteFile(podsLog(dir), buf, 0o644); err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			p2, err := storeproc.Start(storeproc.Options{DataDir: dir, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Stop()
			if !strings.Contains(p2.Tail(), "torn tail") {
				t.Fatalf("restart did not report the torn tail:\n%s", p2.Tail())
			}
			cli := client(t, p2)
			defer cli.Close()
			g, err := cli.Get(context.Background(), "/registry/pods/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Kvs) != 49 {
				t.Fatalf("after cutting the torn tail: %d keys, want the 49 intact ones", len(g.Kvs))
			}
			for i, kv := range g.Kvs {
				if string(kv.Value) != strings.Repeat("v", 100+i) {
					t.Fatalf("key %s holds a wrong value after recovery", kv.Key)
				}
			}
		})
	}
}

// Damage in the middle of a log is not a torn tail: start-up stops and names
// the file and the offset, and nothing is silently dropped.
func TestCorruptionInTheMiddleStopsStartup(t *testing.T) {
	dir, buf := storeWithPodsLog(t)
	buf[len(buf)/2] ^= 0x01
	if err := os.WriteFile(podsLog(dir), buf, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := storeproc.Start(storeproc.Options{DataDir: dir})
	if err == nil {
		t.Fatal("store started on a log corrupted in the middle")
	}
	msg := err.Error()
	if !strings.Contains(msg, "registry+pods+.wal") || !strings.Contains(msg, "corrupt record at offset") {
		t.Fatalf("start-up error does not name the file and offset:\n%s", msg)
	}
}

type dumpRow struct {
	Key                         string
	Value                       string
	Create, Mod, Version, Lease int64
}

// dump reads every key at every retained revision up to `upto`, prefix by
// prefix (a range over memory-only prefixes is compacted by a restart).
func dump(t *testing.T, cli *clientv3.Client, prefixes []string, from, upto int64) map[int64][]dumpRow {
	t.Helper()
	out := map[int64][]dumpRow{}
	for rev := from; rev <= upto; rev++ {
		rows := []dumpRow{}
		for _, p := range prefixes {
			g, err := cli.Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithRev(rev))
			if err != nil {
				t.Fatalf("dump of %s at %d: %v", p, rev, err)
			}
			for _, kv := range g.Kvs {
				rows = append(rows, dumpRow{string(kv.Key), string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease})
			}
		}
		out[rev] = rows
	}
	return out
}

// After a random workload and a restart (SIGKILL, so nothing is flushed by a
// clean shutdown), every key at every retained revision equals the dump before.
func TestRestartEquivalence(t *testing.T) {
	dir := t.TempDir()
	p, err := storeproc.Start(storeproc.Options{DataDir: dir, ExtraArgs: storeArgs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	cli := client(t, p)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(7))
	prefixes := []string{"/registry/pods/", "/registry/secrets/", "/registry/example.com/widgets/", "/other/"}
	key := func() string {
		return fmt.Sprintf("%sns/k%d", prefixes[rng.Intn(len(prefixes))], rng.Intn(40))
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	var compacted int64
	for i := 0; i < 600; i++ {
		switch n := rng.Intn(100); {
		case n < 55:
			opts := []clientv3.OpOption{}
			if rng.Intn(5) == 0 {
				opts = append(opts, clientv3.WithLease(lease.ID))
			}
			if _, err := cli.Put(ctx, key(), fmt.Sprintf("v%d", i), opts...); err != nil {
				t.Fatal(err)
			}
		case n < 70:
			if _, err := cli.Delete(ctx, key()); err != nil {
				t.Fatal(err)
			}
		case n < 75:
			pfx := prefixes[rng.Intn(len(prefixes))]
			if _, err := cli.Delete(ctx, pfx+"ns/k1", clientv3.WithRange(pfx+"ns/k3")); err != nil {
				t.Fatal(err)
			}
		case n < 95:
			k1, k2 := key(), key()
			if k1 == k2 {
				continue
			}
			if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(k1), ">", 0)).
				Then(clientv3.OpPut(k1, fmt.Sprintf("t%d", i)), clientv3.OpDelete(k2)).
				Else(clientv3.OpPut(k2, fmt.Sprintf("e%d", i))).Commit(); err != nil {
				t.Fatal(err)
			}
		case n < 97:
			r, err := cli.Get(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			// Compact a little behind the head so most history stays to compare.
			c := compacted + 1 + rng.Int63n((r.Header.Revision-compacted)/8+1)
			if c > compacted && c <= r.Header.Revision {
				if _, err := cli.Compact(ctx, c); err != nil {
					t.Fatal(err)
				}
				compacted = c
			}
		}
	}
	r, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	end := r.Header.Revision
	from := compacted
	if from < 1 {
		from = 1
	}
	before := dump(t, cli, prefixes, from, end)
	ttlBefore, err := cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	cli = killAndRestart(t, p)
	defer cli.Close()
	after := dump(t, cli, prefixes, from, end)
	if !reflect.DeepEqual(before, after) {
		for rev := from; rev <= end; rev++ {
			if !reflect.DeepEqual(before[rev], after[rev]) {
				t.Fatalf("revision %d differs after restart:\nbefore %v\nafter  %v", rev, before[rev], after[rev])
			}
		}
	}
	// Reads below the compaction point still fail after the restart.
	if compacted > 1 {
		if _, err := cli.Get(ctx, "x", clientv3.WithRev(compacted-1)); err == nil {
			t.Fatalf("read below compaction %d succeeded after restart", compacted)
		}
	}
	ttlAfter, err := cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttlAfter.TTL <= 0 || ttlAfter.GrantedTTL != ttlBefore.GrantedTTL || len(ttlAfter.Keys) != len(ttlBefore.Keys) {
		t.Fatalf("lease after restart: ttl %d granted %d keys %d; before: granted %d keys %d",
			ttlAfter.TTL, ttlAfter.GrantedTTL, len(ttlAfter.Keys), ttlBefore.GrantedTTL, len(ttlBefore.Keys))
	}
	if end-from < 200 {
		t.Fatalf("only %d revisions retained: the workload compacted too much to prove anything", end-from+1)
	}
	t.Logf("%d revisions (%d..%d) equal after restart; compacted at %d", end-from+1, from, end, compacted)
}

// Checkpoints bound replay: with a tiny checkpoint threshold the log is
// truncated into a checkpoint and the state survives a restart from it.
func TestCheckpointAndRestore(t *testing.T) {
	dir := t.TempDir()
	p, err := storeproc.Start(storeproc.Options{DataDir: dir, ExtraArgs: []string{"--wal-checkpoint-bytes=4096"}})
	if err != nil {
		t.Fatal(err)
	}
	cli := client(t, p)
	writeKeys(t, cli, "/registry/pods/", 200)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "registry+pods+.ckpt")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint written within 20s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	writeKeys(t, cli, "/registry/pods/x", 10)
	// A snapshot through the Maintenance API restores into a new directory.
	snapPath := filepath.Join(t.TempDir(), "backup.snap")
	rc, err := cli.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(snapPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, err := cli.Get(context.Background(), "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	p.Kill()
	check := func(p *storeproc.Proc, what string) {
		cli := client(t, p)
		defer cli.Close()
		after, err := cli.Get(context.Background(), "/registry/pods/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Kvs) != 210 || len(after.Kvs) != len(before.Kvs) {
			t.Fatalf("%s: %d keys, want %d", what, len(after.Kvs), len(before.Kvs))
		}
		for i := range after.Kvs {
			a, b := after.Kvs[i], before.Kvs[i]
			if string(a.Key) != string(b.Key) || string(a.Value) != string(b.Value) || a.ModRevision != b.ModRevision || a.CreateRevision != b.CreateRevision || a.Version != b.Version {
				t.Fatalf("%s: %s differs", what, a.Key)
			}
		}
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	check(p, "restart from checkpoint + log")
	p.Stop()
	p2, err := storeproc.Start(storeproc.Options{DataDir: t.TempDir(), ExtraArgs: []string{"--restore-from", snapPath}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Stop()
	check(p2, "restore from snapshot")
	// The restored state is on disk, not only in memory: it survives a crash.
	p2.Kill()
	if err := p2.Restart(); err != nil {
		t.Fatal(err)
	}
	check(p2, "restart after restore")
}

// zeroTail is how many bytes of zeros a file ends in.
func zeroTail(t *testing.T, path string) int {
	t.Helper()
	buf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(buf) && buf[len(buf)-1-n] == 0 {
		n++
	}
	return n
}

// An fsync log past 1 MiB writes zeros ahead of its records (docs/design.md
// §5, "Zeros written ahead"): after a crash the file ends in them, and a
// restart takes them for the log's end — every acknowledged key back, no torn
// tail reported, the zeros cut — and the log grows on from there.
func TestZerosWrittenAheadAreTheLogsEnd(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--durability=fsync"}
	p, err := storeproc.Start(storeproc.Options{DataDir: dir, ExtraArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	value := func(round, i int) string { return fmt.Sprintf("%d-%04d-%s", round, i, strings.Repeat("z", 1000)) }
	put := func(cli *clientv3.Client, round, n int) {
		for i := 0; i < n; i++ {
			if _, err := cli.Put(context.Background(), fmt.Sprintf("/registry/pods/ns/p%04d", i), value(round, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(cli *clientv3.Client, round, n int) {
		g, err := cli.Get(context.Background(), "/registry/pods/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) != n {
			t.Fatalf("round %d: %d keys after the restart, want %d", round, len(g.Kvs), n)
		}
		for i, kv := range g.Kvs {
			if string(kv.Value) != value(round, i) {
				t.Fatalf("round %d: %s holds a wrong value after the restart", round, kv.Key)
			}
		}
	}
	cli := client(t, p)
	for round := 1; round <= 2; round++ {
		put(cli, round, 1500) // ≈1.5 MiB of records in round 1, twice that in the log after round 2
		cli.Close()
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if z := zeroTail(t, podsLog(dir)); z < 256<<10 {
			t.Fatalf("round %d: the log ends in %d bytes of zeros, want ≥ 256 KiB written ahead", round, z)
		}
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(p.Tail(), "torn tail") {
			t.Fatalf("round %d: zeros written ahead reported as a torn tail:\n%s", round, p.Tail())
		}
		if z := zeroTail(t, podsLog(dir)); z != 0 {
			t.Fatalf("round %d: %d bytes of zeros left after recovery", round, z)
		}
		cli = client(t, p)
		check(cli, round, 1500)
	}
	cli.Close()
}
