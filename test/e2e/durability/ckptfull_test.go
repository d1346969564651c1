package durability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A checkpoint that fails for space raises the disk's NOSPACE alarm (docs/design.md §5,
// "Checkpoints"), refuses nothing while the logs still take appends, keeps the log segment it
// would replace (a SIGKILL while it fails loses nothing acknowledged), is retried, and clears the
// alarm by itself once it is written. With 1 MiB checkpoints on a 16 MiB tmpfs: ~0.8 MiB of
// pods, then the disk filled but for 1 MiB, then ~0.5 MiB more: the log passes the threshold,
// the cut leaves 1.3 MiB in registry+pods+.wal.old, and its checkpoint (1.3 MiB) does not fit.
func TestFailedCheckpointRaisesTheAlarm(t *testing.T) {
	dir, p, cli := storeOnTmpfs(t, "16m", "--durability=buffered", "--wal-checkpoint-bytes=1048576")
	data := filepath.Join(dir, "data")
	defer func() { cli.Close() }() // the client after the last restart
	bg := context.Background()
	value := strings.Repeat("c", 3000)
	acked := map[string]string{}
	put := func(k string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, k, value); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		acked[k] = value
	}
	for i := 0; i < 250; i++ {
		put(fmt.Sprintf("/registry/pods/ns/a-%03d", i))
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-1<<20); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 170; i++ {
		put(fmt.Sprintf("/registry/pods/ns/b-%03d", i))
	}
	alarmed := func(want bool, within time.Duration) time.Duration {
		t.Helper()
		t0 := time.Now()
		for {
			al, err := cli.AlarmList(bg)
			if err == nil && (len(al.Alarms) == 1 && al.Alarms[0].Alarm == etcdserverpb.AlarmType_NOSPACE) == want && (want || len(al.Alarms) == 0) {
				return time.Since(t0)
			}
			if time.Since(t0) > within {
				t.Fatalf("alarm NOSPACE raised=%v not seen within %v (%v %v):\n%s", want, within, al, err, p.Tail())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	took := alarmed(true, 5*time.Second)
	t.Logf("alarm raised %v after the log passed the checkpoint threshold", took.Round(time.Millisecond))
	if !strings.Contains(p.Tail(), "checkpoint "+filepath.Join(data, "registry+pods+.ckpt")+" failed") || !strings.Contains(p.Tail(), "No space left on device") {
		t.Fatalf("the error log does not name the checkpoint and the error:\n%s", p.Tail())
	}
	old := filepath.Join(data, "registry+pods+.wal.old")
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the segment the checkpoint would replace: %v", err)
	}
	// Nothing is refused for it: the logs still take appends.
	for i := 0; i < 20; i++ {
		put(fmt.Sprintf("/registry/pods/ns/c-%03d", i))
	}
	check := func(when string) {
		t.Helper()
		lost := len(lostWrites(t, cli, "/registry/pods/", acked))
		t.Logf("%s: %d acknowledged writes checked, %d lost", when, len(acked), lost)
		if lost > 0 {
			t.Fatalf("%s: %d acknowledged writes lost", when, lost)
		}
	}
	// A crash while it fails loses nothing; the restarted store retries it and raises the alarm again.
	cli.Close()
	cli = killAndRestart(t, p)
	check("SIGKILL and restart while the checkpoint fails")
	alarmed(true, 5*time.Second)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	took = alarmed(false, 8*time.Second)
	t.Logf("alarm cleared %v after space returned", took.Round(time.Millisecond))
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("%s still there after the checkpoint succeeded: %v", old, err)
	}
	put("/registry/pods/ns/after")
	cli.Close()
	cli = killAndRestart(t, p)
	check("SIGKILL and restart after the checkpoint")
}
