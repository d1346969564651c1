package durability

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/storeproc"
)

// Starting on a full disk (docs/design.md §5, "Starting on a full disk"): the store starts,
// serves the recovered state, raises NOSPACE, refuses writes — every write, memory-only ones
// too, until its revision reservation (meta.wal) is on disk — and takes writes again within 5 s
// of space returning, without a restart; nothing acknowledged is lost. A fresh data directory
// on a full disk starts the same way. A --restore-from, the one start that cannot go on without
// writing, fails with one error line naming the file and the error, and leaves nothing that
// would stop the next start from restoring.
func TestStartOnAFullDisk(t *testing.T) {
	dir, p, cli := storeOnTmpfs(t, "16m", "--durability=fsync")
	data := filepath.Join(dir, "data")
	defer func() { cli.Close() }() // the client after the last restart
	bg := context.Background()
	value := strings.Repeat("s", 3000)
	for i := 0; i < 50; i++ {
		if _, err := cli.Put(bg, fmt.Sprintf("/registry/pods/ns/p-%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := saveSnapshot(cli, snap); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	// tmpfs allocates whole pages: a start's REV_FLOOR record (17 bytes) would still fit
	// in meta.wal's last page on a full disk. Pad that page with harmless records
	// (REV_FLOOR 0: recovery takes the highest) so that the start's write needs a new one.
	padPage(t, filepath.Join(data, "meta.wal"))
	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	t0 := time.Now()
	if err := p.Restart(); err != nil {
		t.Fatalf("start on a full disk: %v", err)
	}
	t.Logf("started on the full disk in %v", time.Since(t0).Round(time.Millisecond))
	cli = client(t, p)
	g, err := cli.Get(bg, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 50 {
		t.Fatalf("read on a full disk after the start: %v %v", g, err)
	}
	if al, err := cli.AlarmList(bg); err != nil || len(al.Alarms) != 1 || al.Alarms[0].Alarm != etcdserverpb.AlarmType_NOSPACE {
		t.Fatalf("alarms after a start on a full disk: %v %v", al, err)
	}
	if tail := p.Tail(); !strings.Contains(tail, filepath.Join(data, "meta.wal")) || !strings.Contains(tail, "No space left on device") {
		t.Fatalf("the error log does not name the file and the error:\n%s", tail)
	}
	for _, k := range []string{"/registry/pods/ns/new", "/registry/events/ns/e"} {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		_, err := cli.Put(ctx, k, "v")
		cancel()
		if !isNoSpace(err) {
			t.Fatalf("put %s after a start on a full disk: want NOSPACE, got %v", k, err)
		}
	}
	if _, err := cli.Grant(bg, 30); !isNoSpace(err) {
		t.Fatalf("lease grant after a start on a full disk: want NOSPACE, got %v", err)
	}

	// A fresh data directory on the full disk starts too.
	fresh, err := storeproc.Start(storeproc.Options{DataDir: filepath.Join(dir, "fresh"), ExtraArgs: []string{"--durability=fsync"}})
	if err != nil {
		t.Fatalf("start of a fresh data dir on a full disk: %v", err)
	}
	fc := client(t, fresh)
	if al, err := fc.AlarmList(bg); err != nil || len(al.Alarms) != 1 {
		t.Errorf("alarms of a fresh store on a full disk: %v %v", al, err)
	}
	fc.Close()
	_ = fresh.Stop()

	// A restore cannot start without writing: one clear error, nothing left behind.
	restored := filepath.Join(dir, "restored")
	_, err = storeproc.Start(storeproc.Options{DataDir: restored, ExtraArgs: []string{"--durability=fsync", "--restore-from=" + snap}})
	if err == nil {
		t.Fatalf("a restore on a full disk started")
	}
	var fatal []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.Contains(l, "cannot persist the state restored from") {
			fatal = append(fatal, l)
		}
	}
	if len(fatal) != 1 || !strings.Contains(fatal[0], restored+"/") || !strings.Contains(fatal[0], "No space left on device") {
		t.Fatalf("a restore on a full disk: want one error line naming a file of %s and ENOSPC, got:\n%v", restored, err)
	}
	t.Logf("restore on a full disk: %s", fatal[0])

	// Room again: writes are taken within 5 s, without a restart.
	took := writesResume(t, filler, func() error {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		_, err := cli.Put(ctx, "/registry/pods/ns/after", value)
		return err
	})
	t.Logf("writes taken again %v after space returned", took.Round(time.Millisecond))
	if al, err := cli.AlarmList(bg); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms after space returned: %v %v", al, err)
	}
	cli.Close()
	cli = killAndRestart(t, p)
	g, err = cli.Get(bg, "/registry/pods/", clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 51 {
		t.Fatalf("after SIGKILL and restart: %v keys, %v; want 51", len(g.Kvs), err)
	}
	// The failed restore left nothing in the way: with room it restores.
	r, err := storeproc.Start(storeproc.Options{DataDir: restored, ExtraArgs: []string{"--durability=fsync", "--restore-from=" + snap}})
	if err != nil {
		t.Fatalf("restore with room: %v", err)
	}
	defer r.Stop()
	rc := client(t, r)
	defer rc.Close()
	if g, err := rc.Get(bg, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || g.Count != 50 {
		t.Fatalf("restored after a failed restore: %v %v, want 50 keys", g, err)
	}
}

// padPage appends REV_FLOOR(0) records to the meta log until its last page has no room
// for one more (a record is 17 bytes: length, CRC32C, type 6, revision).
func padPage(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 9)
	payload[0] = 6
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	rec = binary.LittleEndian.AppendUint32(rec, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	rec = append(rec, payload...)
	for size := st.Size(); size%4096 != 0 && 4096-size%4096 >= int64(len(rec)); size += int64(len(rec)) {
		if _, err := f.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// saveSnapshot writes the store's Snapshot to path.
func saveSnapshot(cli *clientv3.Client, path string) error {
	rc, err := cli.Snapshot(context.Background())
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadFrom(rc); err != nil {
		return err
	}
	return f.Sync()
}
