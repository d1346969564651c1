package bench

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/etcdref"
)

// The checks of `bench migrate` see a difference in each thing they compare: a server's
// answers against themselves are equal, and each change to the recorded answers — a value, a
// revision, a key missing, HashKV, a lease's TTL or keys — is found and counted.
func TestMigrateCheckFindsDifferences(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	dir, err := os.MkdirTemp(DefaultDataRoot, "bench-migrate-test-")
	if err != nil {
		dir = t.TempDir()
	}
	srv, err := etcdref.Start(etcdref.Options{DataDir: dir, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := newClient([]string{srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := cli.Grant(ctx, MigrateLeaseTTL(7))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/a", "/b", "/c", "/d"} {
		if _, err := cli.Put(ctx, k, "v"+k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "/b", "leased", clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, 3); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, "/e", "last")
	if err != nil {
		t.Fatal(err)
	}
	rev := r.Header.Revision
	read := func() *migrateAnswers {
		a := &migrateAnswers{}
		// A page of 2 keys: the pagination is crossed several times.
		if err := a.read(ctx, cli, srv.Endpoint, rev, 2); err != nil {
			t.Fatal(err)
		}
		return a
	}
	want := read()
	if len(want.keys) != 5 || want.keysWithLease != 1 || len(want.leases) != 1 || want.compacted != 3 {
		t.Fatalf("answers: %d keys, %d with a lease, %d leases, compacted at %d", len(want.keys), want.keysWithLease, len(want.leases), want.compacted)
	}
	c, err := want.compare(ctx, cli, srv.Endpoint, 2)
	if err != nil || !c.Equal || c.Keys != 5 || !c.RefusesCompacted {
		t.Fatalf("a server against its own answers: %+v %v", c, err)
	}

	changed := read()
	changed.keys[0].valueSum[0] ^= 1                             // /a's value
	changed.keys[2].modRev++                                     // /c's mod revision
	changed.keys = append(changed.keys[:3], changed.keys[4:]...) // /d missing from the original: extra on the server
	changed.hash++
	for id, rec := range changed.leases {
		rec.granted++
		changed.leases[id] = rec
	}
	c, err = changed.compare(ctx, cli, srv.Endpoint, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Equal || c.KeysEqual || c.KeyMismatches != 3 || len(c.FirstMismatches) != 3 || c.HashKVEqual || c.LeasesEqual || len(c.LeaseMismatches) != 1 {
		t.Errorf("differences not found: %+v", c)
	}
	t.Log(c.summary())

	changed = read()
	for id, rec := range changed.leases {
		rec.keys, rec.keysSum = 2, [32]byte{}
		changed.leases[id] = rec
	}
	changed.keys = append(changed.keys, keyRecord{key: "/z"}) // on the original only: missing on the server
	c, err = changed.compare(ctx, cli, srv.Endpoint, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Equal || c.KeyMismatches != 1 || c.LeasesEqual {
		t.Errorf("a missing key and a lease's keys not found: %+v", c)
	}
}
