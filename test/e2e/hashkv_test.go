package e2e

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestHashKVEqualsEtcd: the same history written to a fresh etcd and a fresh store gives the same
// HashKV at every revision asked — multi-op transactions (sub-revisions), deletes (tombstone
// records), lease-bound keys, a key re-created after its delete, compactions at a put and at a
// delete, and a history where no key is live (etcd's hash then covers the compacted records it
// keeps). The one answer not compared is a HashKV at exactly a compaction revision: etcd answers
// the hash it took while compacting, over revisions the compaction then removed
// (store/src/mvcc/hash.rs).
func TestHashKVEqualsEtcd(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		var out []string
		hash := func(what string, rev int64) {
			r, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
			if err != nil {
				out = append(out, fmt.Sprintf("%s (rev %d): %v", what, rev, err))
				return
			}
			out = append(out, fmt.Sprintf("%s (rev %d): hash %d compact %d hashed %d", what, rev, r.Hash, r.CompactRevision, r.HashRevision))
		}
		put := func(k, v string, lease int64) int64 {
			r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(k), Value: b(v), Lease: lease})
			must(t, "put "+k, err)
			return r.Header.Revision
		}
		del := func(k, end string) int64 {
			r, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(k), RangeEnd: b(end)})
			must(t, "delete "+k, err)
			return r.Header.Revision
		}
		compact := func(rev int64) {
			_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
			must(t, fmt.Sprint("compact ", rev), err)
		}
		hash("empty", 0)
		_, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 0x2a2a, TTL: 600})
		must(t, "lease grant", err)
		r1 := put("a", "1", 0)
		put("b", "1", 0x2a2a)
		put("a", "2", 0)
		op := func(k, v string) *pb.RequestOp {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(k), Value: b(v)}}}
		}
		tx, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{op("c", "1"), op("d", "1"),
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: b("b")}}}, op("e", "1")}})
		must(t, "txn", err)
		txRev := tx.Header.Revision
		delRev := del("c", "e") // c and d: two tombstones in one revision
		put("c", "2", 0)        // a new generation
		hash("current", 0)
		hash("at the first put", r1)
		hash("at the txn", txRev)
		hash("at the delete", delRev)
		compact(txRev)
		hash("after compacting at the txn", 0)
		hash("above the compaction", txRev+1)
		hash("below the compaction", txRev-1)
		compact(delRev)
		hash("after compacting at a delete", 0)
		put("a", "3", 0)
		hash("after one more put", 0)
		last := del("a", "z")
		hash("nothing live", 0)
		compact(last - 1)
		hash("nothing live, compacted below the delete", 0)
		compact(last)
		hash("nothing live, compacted at the delete", 0)
		tr[tg.Kind] = out
	})
	tr.compare(t)
}
