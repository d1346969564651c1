package e2e

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFollowerReadsItsForwardedWrite: as etcd's member answers a write it took
// once it applied it, a serializable read through the member that forwarded a
// write sees it, whatever the leader's pace in telling followers its commits.
func TestFollowerReadsItsForwardedWrite(t *testing.T) {
	g, clis := startGroup(t)
	l := groupLeader(t, g, clis, -1)
	for _, f := range []int{(l + 1) % 3, (l + 2) % 3} {
		for i := 0; i < 100; i++ {
			k, v := fmt.Sprintf("ryw/m%d", f), fmt.Sprint(i)
			_, err := clis[f].Put(ctxT(t), k, v)
			must(t, "put through a follower", err)
			r, err := clis[f].Get(ctxT(t), k, clientv3.WithSerializable())
			must(t, "serializable get on the same follower", err)
			if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != v {
				t.Fatalf("m%d: put %s=%s, then read %v on the same member", f, k, v, r.Kvs)
			}
		}
	}
}
