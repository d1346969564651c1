package e2e

// Responses that must be etcd's to the field: inner Txn headers, how deep Txns nest, compaction
// revisions, the Maintenance and Cluster answers, gRPC health, and the order of etcd's checks
// and size limits. Each runs against embedded etcd and the store binary with the same assertions.

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const (
	errTooManyOps = "etcdserver: too many operations in txn request"
	errCompacted  = "etcdserver: mvcc: required revision has been compacted"
	errFutureRev  = "etcdserver: mvcc: required revision is a future revision"
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
// holds leaf (or nothing).
func nestTxn(depth int, leaf *pb.RequestOp) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	if leaf != nil {
		t.Success = []*pb.RequestOp{leaf}
	}
	for i := 1; i < depth; i++ {
		t = &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(t)}}
	}
	return t
}

func txnDepth(r *pb.TxnResponse) int {
	d := 1
	for len(r.Responses) == 1 && r.Responses[0].GetResponseTxn() != nil {
		r = r.Responses[0].GetResponseTxn()
		d++
	}
	return d
}

// TestTxnNesting: etcd shares its 128-op budget down the nesting (a level's nested txns get what
// it leaves), so one op per level nests 128 deep, 129 with an empty innermost txn.
func TestTxnNesting(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		for _, depth := range []int{50, 90, 128} {
			r, err := tg.KV.Txn(ctx, nestTxn(depth, putOp(p+"deep", "v")))
			if err != nil {
				t.Errorf("nest of %d: %v", depth, err)
				continue
			}
			if d := txnDepth(r); d != depth {
				t.Errorf("nest of %d: response nests %d deep", depth, d)
			}
		}
		_, err := tg.KV.Txn(ctx, nestTxn(129, getOp(p+"deep")))
		wantErr(t, "nest of 129 with a range", err, codes.InvalidArgument, errTooManyOps)
		_, err = tg.KV.Txn(ctx, nestTxn(129, nil))
		must(t, "nest of 129, the innermost empty", err)
		_, err = tg.KV.Txn(ctx, nestTxn(130, nil))
		wantErr(t, "nest of 130", err, codes.InvalidArgument, errTooManyOps)
		_, err = tg.KV.Txn(ctx, nestTxn(1000, nil))
		wantErr(t, "nest of 1000", err, codes.InvalidArgument, errTooManyOps)
		// Siblings spend the budget: 100 ranges and a nested txn leave it 27.
		with := func(n int) *pb.TxnRequest {
			var ops, inner []*pb.RequestOp
			for i := 0; i < 100; i++ {
				ops = append(ops, getOp(p+"k"))
			}
			for i := 0; i < n; i++ {
				inner = append(inner, getOp(p+"n"))
			}
			return &pb.TxnRequest{Success: append(ops, txnOp(&pb.TxnRequest{Failure: inner}))}
		}
		_, err = tg.KV.Txn(ctx, with(27))
		must(t, "100 ops and a nested txn of 27", err)
		_, err = tg.KV.Txn(ctx, with(28))
		wantErr(t, "100 ops and a nested txn of 28", err, codes.InvalidArgument, errTooManyOps)
		// Errors come depth first: an empty key before the deep nest.
		deep := nestTxn(200, nil)
		deep.Success = append([]*pb.RequestOp{getOp("")}, deep.Success...)
		_, err = tg.KV.Txn(ctx, deep)
		wantErr(t, "empty key before a deep nest", err, codes.InvalidArgument, "etcdserver: key is not provided")
	})
}

// deepTxnBytes is the wire form of nestTxn(depth, getOp(key)), written outside in with the lengths
// measured first: linear, where the Go marshaller takes seconds at 10,000 levels and grows
// quadratically.
func deepTxnBytes(depth int, key string) []byte {
	vl := func(n int) int { return len(binary.AppendUvarint(nil, uint64(n))) }
	rng, _ := (&pb.RangeRequest{Key: b(key)}).Marshal()
	leafOp := 1 + vl(len(rng)) + len(rng)
	txnLen := []int{1 + vl(leafOp) + leafOp}
	opLen := []int{leafOp}
	for i := 1; i < depth; i++ {
		op := 1 + vl(txnLen[i-1]) + txnLen[i-1]
		opLen = append(opLen, op)
		txnLen = append(txnLen, 1+vl(op)+op)
	}
	out := make([]byte, 0, txnLen[depth-1])
	for i := depth - 1; i >= 1; i-- {
		out = binary.AppendUvarint(append(out, 2<<3|2), uint64(opLen[i]))
		out = binary.AppendUvarint(append(out, 4<<3|2), uint64(txnLen[i-1]))
	}
	out = binary.AppendUvarint(append(out, 2<<3|2), uint64(leafOp))
	out = binary.AppendUvarint(append(out, 1<<3|2), uint64(len(rng)))
	return append(out, rng...)
}

// rawCodec sends a request that is already encoded and decodes the response as usual.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(*[]byte); ok {
		return *r, nil
	}
	return v.(interface{ Marshal() ([]byte, error) }).Marshal()
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	return v.(interface{ Unmarshal([]byte) error }).Unmarshal(data)
}

// TestVeryDeepTxn: nests far deeper than any stack, just under and just over gRPC's limit, must
// not crash the store. etcd refuses them too (too many operations, or the message size) but
// takes minutes to decode them, so only the store runs this.
func TestVeryDeepTxn(t *testing.T) {
	if os.Getenv("MEGANODE_E2E_ONLY") == kindEtcd {
		t.Skip("etcd needs minutes for these")
	}
	tg := sharedTarget(t, kindMeganode)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const grpcLimit = 1536*1024 + 512*1024
	small, _ := nestTxn(50, getOp("k")).Marshal()
	if !bytes.Equal(deepTxnBytes(50, "k"), small) {
		t.Fatalf("deepTxnBytes differs from the marshalled nest")
	}
	for _, depth := range []int{10_000, 250_000, 300_000} {
		req := deepTxnBytes(depth, "k")
		start := time.Now()
		var resp pb.TxnResponse
		err := tg.Cli.ActiveConnection().Invoke(ctx, "/etcdserverpb.KV/Txn", &req, &resp, grpc.ForceCodec(rawCodec{}))
		if n := len(req); n > grpcLimit {
			wantErr(t, "nest over the gRPC limit", err, codes.ResourceExhausted, grpcTooLarge(n, 1536*1024))
		} else {
			wantErr(t, "deep nest", err, codes.InvalidArgument, errTooManyOps)
		}
		t.Logf("nest of %d (%d bytes): %v in %v", depth, len(req), status.Code(err), time.Since(start).Round(time.Millisecond))
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/e2e/verydeep/alive"), Value: b("ok")})
		must(t, "put after a deep nest", err)
	}
}

// TestCompactionRevisions: etcd's compaction point starts at -1, so Compact(0) is accepted once on
// a store never compacted; at or below the point ErrCompacted, above the current revision
// ErrFutureRev. HashKV reports the point.
func TestCompactionRevisions(t *testing.T) {
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		h, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{})
		must(t, "hashkv", err)
		if h.CompactRevision != -1 || h.HashRevision != 1 || h.Header.Revision != 1 {
			t.Errorf("hashkv of a fresh store: compact %d, hash revision %d, header %d; want -1, 1, 1", h.CompactRevision, h.HashRevision, h.Header.Revision)
		}
		h, err = tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: -3})
		must(t, "hashkv at -3", err)
		if h.HashRevision != -3 {
			t.Errorf("hashkv at -3: hash revision %d", h.HashRevision)
		}
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: -1})
		wantErr(t, "compact -1", err, codes.OutOfRange, errCompacted)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 2})
		wantErr(t, "compact 2 at revision 1", err, codes.OutOfRange, errFutureRev)
		c, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 0, Physical: true})
		must(t, "compact 0 on a store never compacted", err)
		if c.Header.Revision != 1 {
			t.Errorf("compact 0: header revision %d", c.Header.Revision)
		}
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 0})
		wantErr(t, "compact 0 again", err, codes.OutOfRange, errCompacted)
		// etcd answers a HashKV at a compaction revision from the hash it kept then, with the
		// compaction point before it; 0 is looked up before it stands for the current revision.
		hashKV := func(what string, rev, wantCompact, wantHashRev int64) {
			t.Helper()
			h, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
			must(t, what, err)
			if h.CompactRevision != wantCompact || h.HashRevision != wantHashRev {
				t.Errorf("%s: compact revision %d, hash revision %d; want %d, %d", what, h.CompactRevision, h.HashRevision, wantCompact, wantHashRev)
			}
		}
		hashKV("hashkv 0 after compact 0", 0, -1, 0)
		hashKV("hashkv 1 after compact 0", 1, 0, 1)
		for i := 0; i < 3; i++ {
			_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("k"), Value: b("v")})
			must(t, "put", err)
		}
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 3, Physical: true})
		must(t, "compact 3", err)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 3})
		wantErr(t, "compact 3 again", err, codes.OutOfRange, errCompacted)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 2})
		wantErr(t, "compact 2 after 3", err, codes.OutOfRange, errCompacted)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 5})
		wantErr(t, "compact 5 at revision 4", err, codes.OutOfRange, errFutureRev)
		hashKV("hashkv 3 after compact 3", 3, 0, 3)
		hashKV("hashkv 4 after compact 3", 4, 3, 4)
		c, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 4, Physical: true})
		must(t, "compact 4", err)
		if c.Header.Revision != 4 {
			t.Errorf("compact 4: header revision %d", c.Header.Revision)
		}
		hashKV("hashkv 3 after compact 4", 3, 0, 3)
		hashKV("hashkv 4 after compact 4", 4, 3, 4)
		hashKV("hashkv 0 after compact 4", 0, -1, 0)
	})
}

// TestMaintenanceAnswers: the fields etcd sets, and leaves unset, on Maintenance and Cluster answers.
func TestMaintenanceAnswers(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		d, err := tg.Maint.Defragment(ctx, &pb.DefragmentRequest{})
		must(t, "defragment", err)
		if d.Header != nil {
			t.Errorf("defragment: header %v (etcd: none)", d.Header)
		}
		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		if st.DowngradeInfo == nil || st.DowngradeInfo.Enabled || st.DowngradeInfo.TargetVersion != "" {
			t.Errorf("status downgrade info %v (etcd: present, not enabled)", st.DowngradeInfo)
		}
		if st.StorageVersion != "3.6.0" {
			t.Errorf("status storage version %q", st.StorageVersion)
		}
		me := st.Header.MemberId
		ml, err := tg.Maint.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: me})
		if err != nil {
			t.Errorf("move leader to the member itself: %v", err)
		} else if ml.Header != nil {
			t.Errorf("move leader: header %v (etcd: none)", ml.Header)
		}
		_, err = tg.Maint.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: me + 2})
		wantErr(t, "move leader to an unknown member", err, codes.FailedPrecondition, "etcdserver: bad leader transferee")
		_, err = tg.Maint.MoveLeader(ctx, &pb.MoveLeaderRequest{})
		wantErr(t, "move leader to 0", err, codes.FailedPrecondition, "etcdserver: bad leader transferee")
		// the official client's call
		if _, err = tg.Cli.MoveLeader(ctx, me); err != nil {
			t.Errorf("clientv3 move leader: %v", err)
		}

		mem, err := tg.Cluster.MemberList(ctx, &pb.MemberListRequest{})
		must(t, "member list", err)
		if mem.Header.Revision != 0 || mem.Header.MemberId != me || mem.Header.ClusterId == 0 || mem.Header.RaftTerm == 0 {
			t.Errorf("member list header %v (etcd: cluster, member and term; revision 0)", mem.Header)
		}

		al, err := tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		must(t, "alarm get", err)
		if al.Header == nil || al.Header.Revision == 0 || al.Header.MemberId != me {
			t.Errorf("alarm header %v", al.Header)
		}

		ss, err := tg.Maint.Snapshot(ctx, &pb.SnapshotRequest{})
		must(t, "snapshot", err)
		for {
			r, err := ss.Recv()
			if err == io.EOF {
				break
			}
			must(t, "snapshot chunk", err)
			if r.Header != nil {
				t.Fatalf("snapshot chunk header %v (etcd: none)", r.Header)
			}
		}
	})
}

// TestHealthService: grpc-go's health server as etcd registers it: "" is SERVING, any other name unknown.
func TestHealthService(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		hc := healthpb.NewHealthClient(tg.Cli.ActiveConnection())
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		must(t, "health check", err)
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health: %v", r.Status)
		}
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "etcdserverpb.KV"})
		wantErr(t, "health check of a named service", err, codes.NotFound, "unknown service")
		l, err := hc.List(ctx, &healthpb.HealthListRequest{})
		must(t, "health list", err)
		if len(l.Statuses) != 1 || l.Statuses[""] == nil || l.Statuses[""].Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health list: %v", l.Statuses)
		}
		for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{"": healthpb.HealthCheckResponse_SERVING, "x": healthpb.HealthCheckResponse_SERVICE_UNKNOWN} {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: svc})
			must(t, "health watch", err)
			r, err := w.Recv()
			must(t, "health watch recv", err)
			if r.Status != want {
				t.Errorf("health watch %q: %v, want %v", svc, r.Status, want)
			}
			cancel()
		}
	})
}

// TestChecksBeforeSizeLimits: etcd checks a request before it is proposed, and applies the
// proposal limit (--max-request-bytes) only to proposals: read-only txns are not proposed.
func TestChecksBeforeSizeLimits(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		big := make([]byte, 1600*1024)
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Value: big})
		wantErr(t, "1.6 MiB put without a key", err, codes.InvalidArgument, "etcdserver: key is not provided")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "k"), Value: big, IgnoreValue: true})
		wantErr(t, "1.6 MiB put with ignore_value", err, codes.InvalidArgument, "etcdserver: value is provided")
		_, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{RangeEnd: big})
		wantErr(t, "1.6 MiB delete without a key", err, codes.InvalidArgument, "etcdserver: key is not provided")
		bigKey := p + strings.Repeat("k", 1600*1024)
		r, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp(bigKey)}})
		must(t, "1.6 MiB read-only txn", err)
		if !r.Succeeded || len(r.Responses) != 1 {
			t.Errorf("1.6 MiB read-only txn: %v", r)
		}
		var ops []*pb.RequestOp
		for i := 0; i < 129; i++ {
			ops = append(ops, getOp(p+"k"))
		}
		ops[0] = putOp(bigKey, "v")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: ops})
		wantErr(t, "1.6 MiB txn of 129 ops", err, codes.InvalidArgument, errTooManyOps)
		halfKey := p + strings.Repeat("h", 800*1024)
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(halfKey, "v"), putOp(halfKey, "w")}})
		wantErr(t, "1.6 MiB txn with a duplicate key", err, codes.InvalidArgument, "etcdserver: duplicate key given in txn request")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{getOp(bigKey)}})}})
		wantErr(t, "1.6 MiB txn with a nested read-only txn (a proposal)", err, codes.InvalidArgument, tooLarge)
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"small", "v"), getOp(bigKey)}})
		wantErr(t, "1.6 MiB txn with a put", err, codes.InvalidArgument, tooLarge)
	})
}
