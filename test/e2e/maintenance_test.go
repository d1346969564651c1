package e2e

import (
	"io"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
)

// versionAtLeast compares "X.Y.Z[-suffix]" with want.
func versionAtLeast(v string, want [3]int) bool {
	parts := strings.SplitN(strings.SplitN(v, "-", 2)[0], ".", 3)
	for i := 0; i < 3; i++ {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		if n != want[i] {
			return n > want[i]
		}
	}
	return true
}

func TestMaintenance(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		pr, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "k"), Value: b("v")})
		must(t, "put", err)
		rev := pr.Header.Revision

		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		if !versionAtLeast(st.Version, [3]int{3, 5, 13}) {
			t.Errorf("status version %q < 3.5.13: kube-apiserver would not use RequestProgress", st.Version)
		}
		if st.Header.Revision < rev || st.DbSize <= 0 || st.Leader == 0 || st.Leader != st.Header.MemberId || st.RaftIndex == 0 && tg.Real == "etcd" {
			t.Errorf("status: %v (want revision >= %d, db size > 0, leader = member id)", st, rev)
		}
		if len(st.Errors) != 0 {
			t.Errorf("status errors: %v", st.Errors)
		}
		// the official client's status call
		cst, err := tg.Cli.Status(ctx, tg.Endpoint)
		must(t, "clientv3 status", err)
		if cst.Version != st.Version {
			t.Errorf("clientv3 status version %q", cst.Version)
		}

		al, err := tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		must(t, "alarm get", err)
		if len(al.Alarms) != 0 {
			t.Errorf("alarms: %v", al.Alarms)
		}
		cal, err := tg.Cli.AlarmList(ctx)
		must(t, "clientv3 alarm list", err)
		if len(cal.Alarms) != 0 {
			t.Errorf("clientv3 alarms: %v", cal.Alarms)
		}

		_, err = tg.Maint.Defragment(ctx, &pb.DefragmentRequest{})
		must(t, "defragment", err)
		g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "k")})
		must(t, "range after defragment", err)
		if len(g.Kvs) != 1 {
			t.Errorf("key lost by defragment")
		}

		h, err := tg.Maint.Hash(ctx, &pb.HashRequest{})
		must(t, "hash", err)
		_ = h
		h1, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		must(t, "hashkv", err)
		h2, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		must(t, "hashkv again", err)
		if h1.Hash != h2.Hash || h1.CompactRevision != h2.CompactRevision {
			t.Errorf("hashkv at one revision differs: %v / %v", h1, h2)
		}
		if h1.HashRevision != rev {
			t.Errorf("hashkv hash_revision %d, want %d", h1.HashRevision, rev)
		}
		_, err = tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev + 1000})
		wantErr(t, "hashkv future", err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")

		ss, err := tg.Maint.Snapshot(ctx, &pb.SnapshotRequest{})
		must(t, "snapshot", err)
		total, chunks := 0, 0
		for {
			r, err := ss.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("snapshot stream after %d bytes: %v", total, err)
			}
			total += len(r.Blob)
			chunks++
		}
		if total == 0 {
			t.Errorf("empty snapshot")
		}

		ml, err := tg.Cluster.MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
		must(t, "member list", err)
		if len(ml.Members) != 1 || ml.Members[0].ID == 0 || ml.Members[0].ID != ml.Header.MemberId || ml.Members[0].IsLearner {
			t.Fatalf("member list: %v", ml)
		}
		url := "http://" + tg.Endpoint
		found := false
		for _, u := range ml.Members[0].ClientURLs {
			found = found || u == url
		}
		if !found {
			t.Errorf("member client urls %v lack %s", ml.Members[0].ClientURLs, url)
		}
		// clients sync their endpoints from the member list
		must(t, "clientv3 sync", tg.Cli.Sync(ctx))
		if eps := tg.Cli.Endpoints(); len(eps) != 1 || eps[0] != url {
			t.Errorf("endpoints after sync: %v", eps)
		}
		g, err = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "k")})
		must(t, "range after sync", err)
	})
}
