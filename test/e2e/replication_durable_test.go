package e2e

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReplicatedGroupFsyncSurvivesLosingEveryMember: a group started with
// --durability fsync keeps each member's raft log on disk (docs/design.md §10
// "Durability across members"). A follower killed under load restarts from its
// log (here the leader no longer keeps the entries it missed: it discards its
// log and takes the leader's snapshot); then every member is SIGKILLed at once under load, and
// the group restarted from its disks holds every write it acknowledged, at
// revisions no lower than it answered, with a lease and its key, equal HashKV
// on every member, and takes writes again. Saved snapshots (--snapshot-count
// 200) bound the logs and are what the members restart from.
func TestReplicatedGroupFsyncSurvivesLosingEveryMember(t *testing.T) {
	g, clis := startGroup(t, "--durability", "fsync", "--snapshot-count", "200")
	all := groupClient(t, g.Endpoints()...)
	lease, err := all.Grant(ctxT(t), 600)
	must(t, "grant", err)
	_, err = all.Put(ctxT(t), "lease/key", "held", clientv3.WithLease(lease.ID))
	must(t, "put with lease", err)

	var acked ackedWrites

	// One follower killed and restarted under load.
	l := groupLeader(t, g, clis, -1)
	f := (l + 1) % 3
	stop, wg := make(chan struct{}), &sync.WaitGroup{}
	acked.write(all, 4, "a/", 2*time.Second, stop, wg)
	time.Sleep(1500 * time.Millisecond)
	must(t, "kill follower", g.Members[f].Kill())
	time.Sleep(time.Second)
	must(t, "restart follower", g.Members[f].Restart())
	if !strings.Contains(g.Members[f].Tail(), "restarted from its raft log on disk") {
		t.Errorf("the follower did not restart from its raft log:\n%s", g.Members[f].Tail())
	}
	time.Sleep(time.Second)

	// Every member at once, writes in flight.
	for _, m := range g.Members {
		_ = m.Cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, m := range g.Members {
		must(t, "kill", m.Kill())
	}
	close(stop)
	wg.Wait()
	t.Logf("%d writes acknowledged before every member was killed, the last at revision %d", acked.n.Load(), acked.maxRev.Load())
	if acked.n.Load() < 100 {
		t.Fatalf("only %d writes acknowledged: the test did not load the group", acked.n.Load())
	}
	for i, m := range g.Members {
		must(t, fmt.Sprintf("restart m%d", i), m.Restart())
	}
	groupLeader(t, g, clis, -1)
	waitSameHash(t, g, clis)
	for i, m := range g.Members {
		tail := m.Tail()
		if !strings.Contains(tail, "restarted from its raft log on disk") || !strings.Contains(tail, "loaded its snapshot at raft index") {
			t.Errorf("m%d did not restart from a saved snapshot and its log:\n%s", i, tail)
		}
		r, err := clis[i].Get(ctxT(t), "k/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable())
		must(t, "get", err)
		if r.Header.Revision < acked.maxRev.Load() {
			t.Errorf("m%d: revision %d after the restart, below the acknowledged %d", i, r.Header.Revision, acked.maxRev.Load())
		}
		if lost := acked.lost(r); lost > 0 {
			t.Errorf("m%d: %d of %d acknowledged writes lost", i, lost, acked.n.Load())
		}
		lk, err := clis[i].Get(ctxT(t), "lease/key", clientv3.WithSerializable())
		must(t, "get lease key", err)
		if len(lk.Kvs) != 1 || lk.Kvs[0].Lease != int64(lease.ID) {
			t.Errorf("m%d: the leased key did not come back with its lease: %v", i, lk.Kvs)
		}
	}
	ttl, err := all.TimeToLive(ctxT(t), lease.ID)
	must(t, "lease time to live", err)
	if ttl.TTL <= 0 {
		t.Errorf("the lease did not come back: TTL %d", ttl.TTL)
	}
	_, err = all.Put(ctxT(t), "k/after", "v")
	must(t, "put after the restart", err)
}
