package e2e

// Responses that must be etcd's to the field. Each runs against embedded etcd and the store
// binary with the same assertions.

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

const (
	errTooManyOps = "etcdserver: too many operations in txn request"
)

// innerRevs lists the header revision of every response inside a txn, depth first; -1 for a nil header.
func innerRevs(r *pb.TxnResponse) []int64 {
	var out []int64
	for _, op := range r.Responses {
		switch x := op.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			out = append(out, hdrRev(x.ResponseRange.Header))
		case *pb.ResponseOp_ResponsePut:
			out = append(out, hdrRev(x.ResponsePut.Header))
		case *pb.ResponseOp_ResponseDeleteRange:
			out = append(out, hdrRev(x.ResponseDeleteRange.Header))
		case *pb.ResponseOp_ResponseTxn:
			out = append(out, hdrRev(x.ResponseTxn.Header))
			out = append(out, innerRevs(x.ResponseTxn)...)
		}
	}
	return out
}

func eqRevs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTxnInnerHeaders: etcd's txn write view answers a put with the txn's new revision, a delete
// or a range with it only once something changed (the current revision before), and leaves the
// header of a nested txn empty (revision 0). A txn that changes nothing keeps the revision.
func TestTxnInnerHeaders(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "a"), Value: b("1")})
		must(t, "put", err)
		cases := []struct {
			name string
			ops  func() []*pb.RequestOp
			want func(cur int64) (int64, []int64)
		}{
			{"delete of a missing key", func() []*pb.RequestOp { return []*pb.RequestOp{delOp(p+"missing", "")} },
				func(c int64) (int64, []int64) { return c, []int64{c} }},
			{"delete of a missing key, then a range", func() []*pb.RequestOp {
				return []*pb.RequestOp{delOp(p+"missing", ""), getOp(p + "a")}
			}, func(c int64) (int64, []int64) { return c, []int64{c, c} }},
			{"nested: delete of a missing key", func() []*pb.RequestOp {
				return []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{delOp(p+"missing", ""), getOp(p + "a")}})}
			}, func(c int64) (int64, []int64) { return c, []int64{0, c, c} }},
			{"range, missing delete, put, missing delete, range", func() []*pb.RequestOp {
				return []*pb.RequestOp{getOp(p + "a"), delOp(p+"missing", ""), putOp(p+"b", "x"), delOp(p+"missing2", ""), getOp(p + "b")}
			}, func(c int64) (int64, []int64) { return c + 1, []int64{c, c, c + 1, c + 1, c + 1} }},
			{"missing delete, delete, range", func() []*pb.RequestOp {
				return []*pb.RequestOp{delOp(p+"missing", ""), delOp(p+"b", ""), getOp(p + "b")}
			}, func(c int64) (int64, []int64) { return c + 1, []int64{c, c + 1, c + 1} }},
			{"nested put, then a missing delete", func() []*pb.RequestOp {
				return []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{delOp(p+"missing", ""), putOp(p+"c", "x")}}), delOp(p+"missing", "")}
			}, func(c int64) (int64, []int64) { return c + 1, []int64{0, c, c + 1, c + 1} }},
		}
		for _, tc := range cases {
			cur := curRev(t, tg)
			r, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: tc.ops()})
			must(t, tc.name, err)
			wantRev, wantInner := tc.want(cur)
			if r.Header.Revision != wantRev || !eqRevs(innerRevs(r), wantInner) {
				t.Errorf("%s: header %d, inner %v; want %d, %v", tc.name, r.Header.Revision, innerRevs(r), wantRev, wantInner)
			}
			if got := curRev(t, tg); got != wantRev {
				t.Errorf("%s: revision after the txn %d, want %d", tc.name, got, wantRev)
			}
		}
	})
}

// nestTxn is `depth` levels of txn, each the only op of its parent's success branch; the innermost
