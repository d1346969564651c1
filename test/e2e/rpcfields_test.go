package e2e

// Every RPC of KV, Watch, Lease, Cluster, Maintenance, Auth, Lock and Election, its success and
// its main errors, with the whole response message compared against etcd's: each side runs the
// same steps on a fresh server and writes every answer (status, or the response in protobuf text
// form after normalise) to a transcript; the two must be equal line for line.
//
// What may differ between two servers that behave alike is normalised in exactly one place,
// normalise below, and nowhere else:
//
//	ResponseHeader  cluster_id -> 1001, member_id (this member) -> 2002, raft_term -> 3003 (non-zero ones)
//	Member          ID (this member) -> 2002, a new member's ID -> 4004, name -> "member",
//	                client URLs (this endpoint) -> "client-url", this member's first peer URLs -> "peer-url"
//	AlarmMember     member_id (this member) -> 2002
//	StatusResponse  version -> "version", leader (this member) -> 2002, raft_term -> 3003,
//	                db_size, db_size_in_use, raft_index, raft_applied_index -> 1 (non-zero ones)
//	                errors: this member's id -> 2002
//	HashResponse    hash -> 1 (non-zero; etcd hashes its whole bolt file; HashKV is compared as it is)
//	SnapshotResponse blob -> its length only, version -> "version"
//	AuthenticateResponse token -> "token" (non-empty)
//	LeaseGrantResponse   ID -> 5005 where the request left the ID to the server
//	LeaseTimeToLiveResponse TTL -> granted TTL when within 2 s of it (time passes between calls);
//	                keys sorted (etcd lists them in its map's order)

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

const (
	normClusterID = 1001
	normMemberID  = 2002
	normRaftTerm  = 3003
	normNewMember = 4004
	normLeaseID   = 5005
)

// fieldSide drives one server and writes its transcript of whole answers.
type fieldSide struct {
	t     *testing.T
	tg    *target
	tr    transcripts
	me    uint64 // this member's id
	url   string // this member's client URL
	peer  string // this member's peer URL at the start
	token string // sent with every call when set
	auth  pb.AuthClient
	lock  v3lockpb.LockClient
	elect v3electionpb.ElectionClient
}

// normalise rewrites, in place, the fields listed at the top of this file.
func (f *fieldSide) normalise(m any) {
	walkMessages(reflect.ValueOf(m), func(x any) {
		switch v := x.(type) {
		case *pb.ResponseHeader:
			if v.ClusterId != 0 {
				v.ClusterId = normClusterID
			}
			if v.MemberId == f.me {
				v.MemberId = normMemberID
			}
			if v.RaftTerm != 0 {
				v.RaftTerm = normRaftTerm
			}
		case *pb.Member:
			if v.ID == f.me {
				v.ID = normMemberID
			} else if v.ID != 0 {
				v.ID = normNewMember
			}
			if v.Name != "" {
				v.Name = "member"
			}
			for i, u := range v.ClientURLs {
				if u == f.url {
					v.ClientURLs[i] = "client-url"
				}
			}
			for i, u := range v.PeerURLs {
				if u == f.peer {
					v.PeerURLs[i] = "peer-url"
				}
			}
		case *pb.AlarmMember:
			if v.MemberID == f.me {
				v.MemberID = normMemberID
			}
		case *pb.StatusResponse:
			v.Version = "version"
			for i, e := range v.Errors {
				v.Errors[i] = strings.ReplaceAll(e, fmt.Sprint(f.me), fmt.Sprint(normMemberID))
			}
			if v.Leader == f.me {
				v.Leader = normMemberID
			}
			if v.RaftTerm != 0 {
				v.RaftTerm = normRaftTerm
			}
			for _, n := range []*int64{&v.DbSize, &v.DbSizeInUse} {
				if *n != 0 {
					*n = 1
				}
			}
			for _, n := range []*uint64{&v.RaftIndex, &v.RaftAppliedIndex} {
				if *n != 0 {
					*n = 1
				}
			}
		case *pb.HashResponse:
			if v.Hash != 0 {
				v.Hash = 1
			}
		case *pb.SnapshotResponse:
			if v.Version != "" {
				v.Version = "version"
			}
		case *pb.AuthenticateResponse:
			if v.Token != "" {
				v.Token = "token"
			}
		case *pb.LeaseTimeToLiveResponse:
			if v.TTL <= v.GrantedTTL && v.TTL >= v.GrantedTTL-2 {
				v.TTL = v.GrantedTTL
			}
			sort.Slice(v.Keys, func(i, j int) bool { return string(v.Keys[i]) < string(v.Keys[j]) })
		}
	})
}

// walkMessages calls fn on every non-nil pointer reachable from v (oneof wrappers included).
func walkMessages(v reflect.Value, fn func(any)) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		fn(v.Interface())
		walkMessages(v.Elem(), fn)
	case reflect.Interface:
		if !v.IsNil() {
			walkMessages(v.Elem(), fn)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				walkMessages(v.Field(i), fn)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len(); i++ {
				walkMessages(v.Index(i), fn)
			}
		}
	}
}

// rec writes one answer: the status, and the normalised response when the call succeeded.
func (f *fieldSide) rec(what string, resp fmt.Stringer, err error) {
	f.t.Helper()
	if err != nil || resp == nil || reflect.ValueOf(resp).IsNil() {
		f.tr.add(f.tg, what, err)
		return
	}
	f.normalise(resp)
	f.tr.note(f.tg, what+": OK "+resp.String())
}

func (f *fieldSide) ctx() context.Context {
	ctx := ctxT(f.t)
	if f.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "token", f.token)
	}
	return ctx
}

func newFieldSide(t *testing.T, tg *target, tr transcripts) *fieldSide {
	conn := tg.Cli.ActiveConnection()
	f := &fieldSide{t: t, tg: tg, tr: tr, url: "http://" + tg.Endpoint,
		auth: pb.NewAuthClient(conn), lock: v3lockpb.NewLockClient(conn), elect: v3electionpb.NewElectionClient(conn)}
	st, err := tg.Maint.Status(ctxT(t), &pb.StatusRequest{})
	must(t, "status", err)
	f.me = st.Header.MemberId
	ml, err := tg.Cluster.MemberList(ctxT(t), &pb.MemberListRequest{})
	must(t, "member list", err)
	if len(ml.Members) != 1 || len(ml.Members[0].PeerURLs) != 1 {
		t.Fatalf("member list: %v", ml)
	}
	f.peer = ml.Members[0].PeerURLs[0]
	return f
}

func rangeOf(k, end string) *pb.RangeRequest { return &pb.RangeRequest{Key: b(k), RangeEnd: b(end)} }

func (f *fieldSide) kv() {
	kv, ctx := f.tg.KV, f.ctx()
	r := func(what string, req *pb.RangeRequest) {
		f.t.Helper()
		resp, err := kv.Range(ctx, req)
		f.rec(what, resp, err)
	}
	put := func(what string, req *pb.PutRequest) {
		f.t.Helper()
		resp, err := kv.Put(ctx, req)
		f.rec(what, resp, err)
	}
	del := func(what string, req *pb.DeleteRangeRequest) {
		f.t.Helper()
		resp, err := kv.DeleteRange(ctx, req)
		f.rec(what, resp, err)
	}
	txn := func(what string, req *pb.TxnRequest) {
		f.t.Helper()
		resp, err := kv.Txn(ctx, req)
		f.rec(what, resp, err)
	}
	r("range of nothing", rangeOf("a", ""))
	put("put a", &pb.PutRequest{Key: b("a"), Value: b("1")})
	put("put a again, prev_kv", &pb.PutRequest{Key: b("a"), Value: b("2"), PrevKv: true})
	put("put b", &pb.PutRequest{Key: b("b"), Value: b("1")})
	put("put c", &pb.PutRequest{Key: b("c"), Value: b("1")})
	put("put a ignore_value, prev_kv", &pb.PutRequest{Key: b("a"), IgnoreValue: true, PrevKv: true})
	put("put missing ignore_value", &pb.PutRequest{Key: b("zz"), IgnoreValue: true})
	put("put missing ignore_lease", &pb.PutRequest{Key: b("zz"), Value: b("x"), IgnoreLease: true})
	put("put with a missing lease", &pb.PutRequest{Key: b("zz"), Value: b("x"), Lease: 999})
	put("put without a key", &pb.PutRequest{Value: b("x")})
	put("put ignore_value with a value", &pb.PutRequest{Key: b("a"), Value: b("x"), IgnoreValue: true})
	r("range a", rangeOf("a", ""))
	r("range all", rangeOf("\x00", "\x00"))
	r("range all, limit 2", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), Limit: 2})
	r("range all, count only", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), CountOnly: true})
	r("range all, keys only", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), KeysOnly: true})
	r("range all, sort by value descending", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"),
		SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD})
	r("range all, serializable", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), Serializable: true})
	r("range all at revision 2", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), Revision: 2})
	r("range all, mod revision 3 to 4", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), MinModRevision: 3, MaxModRevision: 4})
	r("range all, create revision from 4", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), MinCreateRevision: 4})
	r("range at a future revision", &pb.RangeRequest{Key: b("a"), Revision: 100})
	r("range without a key", &pb.RangeRequest{})
	del("delete missing", &pb.DeleteRangeRequest{Key: b("zz")})
	del("delete c, prev_kv", &pb.DeleteRangeRequest{Key: b("c"), PrevKv: true})
	del("delete without a key", &pb.DeleteRangeRequest{})
	cmp := func(k string, v int64) *pb.Compare {
		return &pb.Compare{Key: b(k), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: v}}
	}
	txn("empty txn", &pb.TxnRequest{})
	txn("txn: version a = 3, get a, put d", &pb.TxnRequest{Compare: []*pb.Compare{cmp("a", 3)},
		Success: []*pb.RequestOp{getOp("a"), putOp("d", "1")}, Failure: []*pb.RequestOp{getOp("b")}})
	txn("txn: version a = 9 fails, get b", &pb.TxnRequest{Compare: []*pb.Compare{cmp("a", 9)},
		Success: []*pb.RequestOp{getOp("a")}, Failure: []*pb.RequestOp{getOp("b"), delOp("zz", "")}})
	txn("txn: nested put and delete with prev_kv", &pb.TxnRequest{Success: []*pb.RequestOp{
		txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("e", "1"), {Request: &pb.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &pb.DeleteRangeRequest{Key: b("d"), PrevKv: true}}}}})}})
	txn("txn: duplicate put", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("x", "1"), putOp("x", "2")}})
	txn("txn: put with a missing lease", &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b("x"), Value: b("1"), Lease: 999}}}}})
	txn("txn: compare over a range [a, c) by version > 0, delete [b, c)", &pb.TxnRequest{Compare: []*pb.Compare{{Key: b("a"), RangeEnd: b("c"),
		Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: b("b"), RangeEnd: b("c"), PrevKv: true}}}}})
	txn("txn: compare lease of a = 0, value of missing < x, mod of e != 0", &pb.TxnRequest{Compare: []*pb.Compare{
		{Key: b("a"), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Lease{Lease: 0}},
		{Key: b("e"), Target: pb.Compare_MOD, Result: pb.Compare_NOT_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}},
		Success: []*pb.RequestOp{putOp("b", "2"), getOp("b")}})
	txn("txn: value compare on a missing key fails", &pb.TxnRequest{Compare: []*pb.Compare{
		{Key: b("zz"), Target: pb.Compare_VALUE, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_Value{Value: b("x")}}},
		Failure: []*pb.RequestOp{getOp("zz")}})
	put("put new key f with prev_kv (none)", &pb.PutRequest{Key: b("f"), Value: b("1"), PrevKv: true})
	r("range [a, \\x00) sorted by create revision ascending, limit 2", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"),
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, Limit: 2})
	r("range [a, \\x00) sorted by key descending, keys only", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"),
		SortOrder: pb.RangeRequest_DESCEND, KeysOnly: true})
	r("range [a, \\x00) sort target value, no order", &pb.RangeRequest{Key: b("a"), RangeEnd: b("\x00"), SortTarget: pb.RangeRequest_VALUE})
	del("delete [e, g) prev_kv", &pb.DeleteRangeRequest{Key: b("e"), RangeEnd: b("g"), PrevKv: true})
	cr, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: 3})
	f.rec("compact 3", cr, err)
	cr, err = kv.Compact(ctx, &pb.CompactionRequest{Revision: 2})
	f.rec("compact 2 (compacted)", cr, err)
	cr, err = kv.Compact(ctx, &pb.CompactionRequest{Revision: 1000})
	f.rec("compact 1000 (future)", cr, err)
	r("range at a compacted revision", &pb.RangeRequest{Key: b("a"), Revision: 2})
}

// watchStream opens a stream; create/recv write its answers. Each stream's answers come in one
// order on both servers (a compacted watch's cancel follows its creation, etcd's a moment later).
type watchStream struct {
	f *fieldSide
	w pb.Watch_WatchClient
}

func (f *fieldSide) watchStream(ctx context.Context) *watchStream {
	w, err := f.tg.Watch.Watch(ctx)
	must(f.t, "watch stream", err)
	return &watchStream{f, w}
}

func (s *watchStream) recv(what string) {
	s.f.t.Helper()
	resp, err := s.w.Recv()
	s.f.rec(what, resp, err)
}

func (s *watchStream) send(what string, r *pb.WatchRequest) {
	s.f.t.Helper()
	must(s.f.t, what, s.w.Send(r))
	s.recv(what)
}

func (s *watchStream) create(what string, c *pb.WatchCreateRequest) {
	s.f.t.Helper()
	s.send(what, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

func progressReq() *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
}

func cancelReq(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

func (f *fieldSide) watch() {
	ctx, cancel := context.WithCancel(f.ctx())
	defer cancel()
	put := func(k, v string) {
		_, err := f.tg.KV.Put(f.ctx(), &pb.PutRequest{Key: b(k), Value: b(v)})
		must(f.t, "put "+k, err)
	}
	a := f.watchStream(ctx)
	a.create("A: watch w from now", &pb.WatchCreateRequest{Key: b("w")})
	a.create("A: watch v with id 100, fragment, progress notify", &pb.WatchCreateRequest{Key: b("v"), WatchId: 100, Fragment: true, ProgressNotify: true})
	a.create("A: watch with id 100 again", &pb.WatchCreateRequest{Key: b("v"), WatchId: 100})
	put("w", "1")
	a.recv("A: put w")
	_, err := f.tg.KV.DeleteRange(f.ctx(), &pb.DeleteRangeRequest{Key: b("w")})
	must(f.t, "delete w", err)
	a.recv("A: delete w")
	a.send("A: progress", progressReq())
	a.send("A: cancel watch 0", cancelReq(0))
	// etcd answers nothing to the cancel of an unknown watch: the progress answer comes next.
	must(f.t, "cancel", a.w.Send(cancelReq(77)))
	a.send("A: cancel of an unknown watch, then progress", progressReq())

	bs := f.watchStream(ctx)
	rev := curRev(f.t, f.tg)
	bs.create("B: watch [w, x) from the delete, prev_kv, no deletes", &pb.WatchCreateRequest{Key: b("w"), RangeEnd: b("x"), StartRevision: rev,
		PrevKv: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}})
	put("w", "2")
	bs.recv("B: put w")
	put("wa", "1")
	put("w", "3")
	bs.recv("B: put wa")
	bs.recv("B: put w again")

	e := f.watchStream(ctx)
	e.create("E: watch [w, x) without puts, prev_kv", &pb.WatchCreateRequest{Key: b("w"), RangeEnd: b("x"), PrevKv: true,
		Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}})
	put("wb", "1")
	_, err = f.tg.KV.Txn(f.ctx(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp("wc", "1"), delOp("wa", "wb\x00")}})
	must(f.t, "txn", err)
	e.recv("E: the txn's deletes of wa and wb")
	e.send("E: cancel", cancelReq(0))

	c := f.watchStream(ctx)
	c.create("C: watch at a compacted revision", &pb.WatchCreateRequest{Key: b("w"), StartRevision: 2})
	c.recv("C: its cancel")
	c.create("C: watch from revision 1", &pb.WatchCreateRequest{Key: b("w"), StartRevision: 1, WatchId: 5})
	c.recv("C: its cancel")
	c.create("C: watch without a key", &pb.WatchCreateRequest{})
	c.create("C: watch with id 5 again (its compacted watch holds it)", &pb.WatchCreateRequest{Key: b("w"), WatchId: 5})
	c.create("C: watch of an empty range, id 1 taken", &pb.WatchCreateRequest{Key: b("w"), RangeEnd: b("a"), WatchId: 1})
	c.create("C: watch of a future revision", &pb.WatchCreateRequest{Key: b("w"), StartRevision: rev + 1000})
	// etcd answers no progress request while a watcher of the stream waits for a future
	// start revision or was cancelled by a compaction and not by the client.
	must(f.t, "progress", c.w.Send(progressReq()))
	c.send("C: cancel of the future watch", cancelReq(2))
	must(f.t, "progress", c.w.Send(progressReq()))
	c.send("C: cancel of compacted watch 0", cancelReq(0))
	c.send("C: cancel of compacted watch 5", cancelReq(5))
	c.send("C: progress", progressReq())
	c.create("C: watch with id 5 again", &pb.WatchCreateRequest{Key: b("w"), WatchId: 5})
	d := f.watchStream(ctx)
	d.create("D: watch from the next revision", &pb.WatchCreateRequest{Key: b("w"), StartRevision: curRev(f.t, f.tg) + 1})
	must(f.t, "progress", d.w.Send(progressReq()))
	put("w", "4")
	d.recv("D: put w (no progress answer before it)")
	d.send("D: progress", progressReq())
}

func (f *fieldSide) lease() {
	ls, ctx := f.tg.Lease, f.ctx()
	g, err := ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7001, TTL: 60})
	f.rec("grant 7001 ttl 60", g, err)
	g, err = ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7001, TTL: 60})
	f.rec("grant 7001 again", g, err)
	g, err = ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7002, TTL: 1})
	f.rec("grant 7002 ttl 1 (raised to the minimum)", g, err)
	g, err = ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err == nil {
		g.ID = normLeaseID
	}
	f.rec("grant with no id", g, err)
	g, err = ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7003, TTL: 9_000_000_001})
	f.rec("grant with a ttl too large", g, err)
	_, err = f.tg.KV.Put(ctx, &pb.PutRequest{Key: b("l1"), Value: b("v"), Lease: 7001})
	must(f.t, "put on lease", err)
	_, err = f.tg.KV.Put(ctx, &pb.PutRequest{Key: b("l2"), Value: b("v"), Lease: 7001})
	must(f.t, "put on lease", err)
	tl, err := ls.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 7001, Keys: true})
	f.rec("time to live 7001 with keys", tl, err)
	tl, err = ls.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 7001})
	f.rec("time to live 7001", tl, err)
	tl, err = ls.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 9999})
	f.rec("time to live of a missing lease", tl, err)
	// 7002 (TTL 2) expires: its key goes, and the lease is gone for TimeToLive and KeepAlive.
	_, err = f.tg.KV.Put(ctx, &pb.PutRequest{Key: b("l3"), Value: b("v"), Lease: 7002})
	must(f.t, "put on 7002", err)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if g, err := f.tg.KV.Range(ctx, rangeOf("l3", "")); err == nil && len(g.Kvs) == 0 {
			break
		}
	}
	tl, err = ls.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 7002, Keys: true})
	f.rec("time to live of the expired 7002", tl, err)
	rv0, err := ls.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 7002})
	f.rec("revoke the expired 7002", rv0, err)
	ll, err := ls.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	if err == nil { // the order of etcd's list is its map's
		for i, l := range ll.Leases {
			if l.ID != 7001 {
				ll.Leases[i].ID = normLeaseID
			}
		}
		sortLeases(ll.Leases)
	}
	f.rec("leases", ll, err)
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka, err := ls.LeaseKeepAlive(kctx)
	must(f.t, "keepalive stream", err)
	for _, id := range []int64{7001, 9999} {
		must(f.t, "keepalive send", ka.Send(&pb.LeaseKeepAliveRequest{ID: id}))
		resp, err := ka.Recv()
		f.rec(fmt.Sprintf("keepalive %d", id), resp, err)
	}
	rv, err := ls.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 7001})
	f.rec("revoke 7001", rv, err)
	rv, err = ls.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 7001})
	f.rec("revoke 7001 again", rv, err)
	gr, err := f.tg.KV.Range(ctx, rangeOf("l", "m"))
	f.rec("keys of the revoked lease", gr, err)
}

func sortLeases(ls []*pb.LeaseStatus) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].ID < ls[j-1].ID; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

func (f *fieldSide) cluster() {
	c, ctx := f.tg.Cluster, f.ctx()
	ml, err := c.MemberList(ctx, &pb.MemberListRequest{})
	f.rec("member list", ml, err)
	ml, err = c.MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
	f.rec("member list, linearizable", ml, err)
	mu, err := c.MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: f.me + 2, PeerURLs: []string{"http://127.0.0.1:1"}})
	f.rec("member update of an unknown member", mu, err)
	mu, err = c.MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: f.me, PeerURLs: []string{"http://127.0.0.1:1", "http://127.0.0.2:1"}})
	f.rec("member update of itself", mu, err)
	ml, err = c.MemberList(ctx, &pb.MemberListRequest{})
	f.rec("member list after the update", ml, err)
	mu, err = c.MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: f.me, PeerURLs: []string{f.peer}})
	f.rec("member update back", mu, err)
	mr, err := c.MemberRemove(ctx, &pb.MemberRemoveRequest{ID: f.me + 2})
	f.rec("member remove of an unknown member", mr, err)
	mr, err = c.MemberRemove(ctx, &pb.MemberRemoveRequest{ID: f.me})
	f.rec("member remove of itself", mr, err)
	mp, err := c.MemberPromote(ctx, &pb.MemberPromoteRequest{ID: f.me + 2})
	f.rec("member promote of an unknown member", mp, err)
	mp, err = c.MemberPromote(ctx, &pb.MemberPromoteRequest{ID: f.me})
	f.rec("member promote of itself (a voting member)", mp, err)
	for _, urls := range [][]string{nil, {"::bad"}, {"http://10.0.0.1"}, {"http://10.0.0.1:2380/x"}, {"ftp://10.0.0.1:2380"}, {"http://10.0.0.1:2380", "bad"}} {
		ma, err := c.MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: urls})
		f.rec(fmt.Sprintf("member add with peer urls %q", urls), ma, err)
	}
	ma, err := c.MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{f.peer}})
	f.rec("member add with this member's peer url", ma, err)
	ma, err = c.MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{f.peer}, IsLearner: true})
	f.rec("member add of a learner with this member's peer url", ma, err)
	// A new peer: etcd adds it (a single member accepts a second, IsReadyToAddVotingMember) and
	// then waits for it; the store cannot, and says so (docs/design.md §6 Membership).
	if f.tg.Real == "meganode-store" {
		for _, learner := range []bool{false, true} {
			_, err := c.MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{"http://10.0.0.1:2380"}, IsLearner: learner})
			wantErr(f.t, "member add of a new peer", err, codes.Unimplemented, "meganode-store is a single member: it cannot add members")
		}
	}
}

func (f *fieldSide) maintenance() {
	m, ctx := f.tg.Maint, f.ctx()
	st, err := m.Status(ctx, &pb.StatusRequest{})
	f.rec("status", st, err)
	al, err := m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	f.rec("alarm get", al, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: f.me, Alarm: pb.AlarmType_NOSPACE})
	f.rec("alarm deactivate, none raised", al, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: f.me, Alarm: pb.AlarmType_CORRUPT})
	f.rec("alarm activate corrupt", al, err)
	st, err = m.Status(ctx, &pb.StatusRequest{})
	f.rec("status with an alarm", st, err)
	pr, err := f.tg.KV.Put(ctx, &pb.PutRequest{Key: b("x"), Value: b("1")})
	f.rec("put with corrupt raised", pr, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: f.me, Alarm: pb.AlarmType_CORRUPT})
	f.rec("alarm deactivate corrupt", al, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: f.me, Alarm: pb.AlarmType_NOSPACE})
	f.rec("alarm activate nospace", al, err)
	pr, err = f.tg.KV.Put(ctx, &pb.PutRequest{Key: b("x"), Value: b("1")})
	f.rec("put with nospace raised", pr, err)
	dr, err := f.tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b("x")})
	f.rec("delete with nospace raised", dr, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_NOSPACE})
	f.rec("alarm get nospace", al, err)
	al, err = m.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: f.me, Alarm: pb.AlarmType_NOSPACE})
	f.rec("alarm deactivate nospace", al, err)
	d, err := m.Defragment(ctx, &pb.DefragmentRequest{})
	f.rec("defragment", d, err)
	h, err := m.Hash(ctx, &pb.HashRequest{})
	f.rec("hash", h, err)
	hk, err := m.HashKV(ctx, &pb.HashKVRequest{})
	f.rec("hashkv", hk, err)
	hk, err = m.HashKV(ctx, &pb.HashKVRequest{Revision: 4})
	f.rec("hashkv at 4", hk, err)
	hk, err = m.HashKV(ctx, &pb.HashKVRequest{Revision: 1})
	f.rec("hashkv at a compacted revision", hk, err)
	mv, err := m.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: f.me})
	f.rec("move leader to itself", mv, err)
	mv, err = m.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: f.me + 2})
	f.rec("move leader to an unknown member", mv, err)
	ss, err := m.Snapshot(ctx, &pb.SnapshotRequest{})
	must(f.t, "snapshot", err)
	var total int
	var last *pb.SnapshotResponse
	for {
		r, err := ss.Recv()
		if err == io.EOF {
			break
		}
		must(f.t, "snapshot chunk", err)
		if last == nil { // the first chunk whole, blob and remaining bytes aside
			first := *r
			first.Blob, first.RemainingBytes = nil, 0
			f.rec("snapshot: first chunk", &first, nil)
		}
		total += len(r.Blob)
		last = r
	}
	if last != nil {
		last.Blob = nil
		f.rec("snapshot: last chunk", last, nil)
	}
	f.tr.note(f.tg, fmt.Sprintf("snapshot: blob not empty %v", total > 0))
	for _, a := range []struct {
		what string
		act  pb.DowngradeRequest_DowngradeAction
		ver  string
	}{
		{"downgrade validate 3.5", pb.DowngradeRequest_VALIDATE, "3.5"},
		{"downgrade validate 3.4", pb.DowngradeRequest_VALIDATE, "3.4"},
		{"downgrade validate 3.6", pb.DowngradeRequest_VALIDATE, "3.6"},
		{"downgrade validate 3.7", pb.DowngradeRequest_VALIDATE, "3.7"},
		{"downgrade validate garbage", pb.DowngradeRequest_VALIDATE, "x.y"},
		{"downgrade cancel, none enabled", pb.DowngradeRequest_CANCEL, ""},
		{"downgrade enable 3.5", pb.DowngradeRequest_ENABLE, "3.5"},
		{"downgrade enable 3.5 again", pb.DowngradeRequest_ENABLE, "3.5"},
		{"downgrade validate 3.5, enabled", pb.DowngradeRequest_VALIDATE, "3.5"},
		{"status while downgrading", -1, ""},
		{"downgrade cancel", pb.DowngradeRequest_CANCEL, ""},
		{"status after the cancel", -1, ""},
		{"downgrade cancel again", pb.DowngradeRequest_CANCEL, ""},
		{"downgrade of an unknown action", 7, ""},
	} {
		if a.act < 0 {
			st, err := m.Status(ctx, &pb.StatusRequest{})
			f.rec(a.what, st, err)
			continue
		}
		r, err := m.Downgrade(ctx, &pb.DowngradeRequest{Action: a.act, Version: a.ver})
		f.rec(a.what, r, err)
	}
}

func (f *fieldSide) authRPCs() {
	a, ctx := f.auth, f.ctx()
	rec := func(what string, resp fmt.Stringer, err error) { f.t.Helper(); f.rec(what, resp, err) }
	st, err := a.AuthStatus(ctx, &pb.AuthStatusRequest{})
	rec("auth status", st, err)
	en, err := a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	rec("auth enable without root", en, err)
	ua, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
	rec("user add root", ua, err)
	ua, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})
	rec("user add alice", ua, err)
	ua, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "svc", Options: &authpb.UserAddOptions{NoPassword: true}})
	rec("user add svc without password", ua, err)
	ua, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "x"})
	rec("user add alice again", ua, err)
	ra, err := a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "root"})
	rec("role add root", ra, err)
	ra, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "rw"})
	rec("role add rw", ra, err)
	ra, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "rw"})
	rec("role add rw again", ra, err)
	gp, err := a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "rw", Perm: perm(authpb.READWRITE, "a", "c")})
	rec("role grant rw [a, c)", gp, err)
	gp, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "rw", Perm: perm(authpb.READ, "k", "")})
	rec("role grant rw read k", gp, err)
	gp, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "nope", Perm: perm(authpb.READ, "k", "")})
	rec("role grant to a missing role", gp, err)
	rg, err := a.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "rw"})
	rec("role get rw", rg, err)
	rg, err = a.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "nope"})
	rec("role get missing", rg, err)
	rp, err := a.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: b("k")})
	rec("role revoke read k", rp, err)
	rp, err = a.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: b("k")})
	rec("role revoke read k again", rp, err)
	rl, err := a.RoleList(ctx, &pb.AuthRoleListRequest{})
	rec("role list", rl, err)
	ug, err := a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	rec("user grant root root", ug, err)
	ug, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "rw"})
	rec("user grant alice rw", ug, err)
	ug, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "nope"})
	rec("user grant alice a missing role", ug, err)
	ur, err := a.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "nope"})
	rec("user revoke a role alice lacks", ur, err)
	u, err := a.UserGet(ctx, &pb.AuthUserGetRequest{Name: "alice"})
	rec("user get alice", u, err)
	u, err = a.UserGet(ctx, &pb.AuthUserGetRequest{Name: "nobody"})
	rec("user get missing", u, err)
	ul, err := a.UserList(ctx, &pb.AuthUserListRequest{})
	rec("user list", ul, err)
	cp, err := a.UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "alicepw2"})
	rec("user change password", cp, err)
	cp, err = a.UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: "nobody", Password: "x"})
	rec("user change password of a missing user", cp, err)
	en, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	rec("auth enable", en, err)
	at, err := a.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	rec("authenticate alice, old password", at, err)
	at, err = a.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw2"})
	alice := at.GetToken() // before rec normalises it
	rec("authenticate alice", at, err)
	at, err = a.Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
	f.token = at.GetToken()
	rec("authenticate root", at, err)
	ctx = f.ctx()
	st, err = a.AuthStatus(ctx, &pb.AuthStatusRequest{})
	rec("auth status, enabled", st, err)
	actx := metadata.AppendToOutgoingContext(ctxT(f.t), "token", alice)
	pr, err := f.tg.KV.Put(actx, &pb.PutRequest{Key: b("a"), Value: b("alice")})
	rec("alice put a", pr, err)
	pr, err = f.tg.KV.Put(actx, &pb.PutRequest{Key: b("z"), Value: b("alice")})
	rec("alice put z (denied)", pr, err)
	ul, err = a.UserList(actx, &pb.AuthUserListRequest{})
	rec("alice lists users (denied)", ul, err)
	u, err = a.UserGet(actx, &pb.AuthUserGetRequest{Name: "alice"})
	rec("alice gets herself", u, err)
	ml, err := f.tg.Cluster.MemberList(actx, &pb.MemberListRequest{})
	rec("alice lists members", ml, err)
	ml, err = f.tg.Cluster.MemberList(ctxT(f.t), &pb.MemberListRequest{})
	rec("member list without a token", ml, err)
	mu, err := f.tg.Cluster.MemberUpdate(actx, &pb.MemberUpdateRequest{ID: f.me, PeerURLs: []string{f.peer}})
	rec("alice updates the member (denied)", mu, err)
	mr, err := f.tg.Cluster.MemberRemove(actx, &pb.MemberRemoveRequest{ID: f.me + 2})
	rec("alice removes a member (denied)", mr, err)
	mp, err := f.tg.Cluster.MemberPromote(actx, &pb.MemberPromoteRequest{ID: f.me + 2})
	rec("alice promotes a member (denied)", mp, err)
	ma, err := f.tg.Cluster.MemberAdd(actx, &pb.MemberAddRequest{PeerURLs: []string{f.peer}})
	rec("alice adds a member (denied)", ma, err)
	ma, err = f.tg.Cluster.MemberAdd(actx, &pb.MemberAddRequest{PeerURLs: []string{"bad"}})
	rec("alice adds a member with a bad url", ma, err)
	mu, err = f.tg.Cluster.MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: f.me, PeerURLs: []string{f.peer}})
	rec("root updates the member", mu, err)
	dg, err := f.tg.Maint.Downgrade(actx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: "3.5"})
	rec("alice validates a downgrade (denied)", dg, err)
	for _, who := range []struct {
		name string
		ctx  context.Context
	}{{"alice", actx}, {"root", ctx}, {"no token", ctxT(f.t)}} {
		ss, err := f.tg.Maint.Snapshot(who.ctx, &pb.SnapshotRequest{})
		if err == nil {
			var r *pb.SnapshotResponse
			if r, err = ss.Recv(); err == nil {
				r.Blob, r.RemainingBytes = nil, 0
			}
			rec(who.name+" takes a snapshot", r, err)
		} else {
			rec(who.name+" takes a snapshot", nil, err)
		}
	}
	ud, err := a.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: "svc"})
	rec("user delete svc", ud, err)
	ud, err = a.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: "svc"})
	rec("user delete svc again", ud, err)
	ur, err = a.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"})
	rec("user revoke root from root (auth on)", ur, err)
	rd, err := a.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: "root"})
	rec("role delete root (auth on)", rd, err)
	rd, err = a.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: "nope"})
	rec("role delete missing", rd, err)
	ur, err = a.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "rw"})
	rec("user revoke alice rw", ur, err)
	rd, err = a.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: "rw"})
	rec("role delete rw", rd, err)
	ds, err := a.AuthDisable(ctx, &pb.AuthDisableRequest{})
	rec("auth disable", ds, err)
	f.token = ""
	ds, err = a.AuthDisable(f.ctx(), &pb.AuthDisableRequest{})
	rec("auth disable again", ds, err)
}

func (f *fieldSide) lockElection() {
	ctx := f.ctx()
	for _, id := range []int64{8001, 8002} {
		_, err := f.tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 60})
		must(f.t, "grant", err)
	}
	lk, err := f.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b("lk"), Lease: 8001})
	f.rec("lock lk", lk, err)
	lk2, err := f.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b("lk"), Lease: 9999})
	f.rec("lock with a missing lease", lk2, err)
	ul, err := f.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: b("lk/1f41")})
	f.rec("unlock", ul, err)
	ul, err = f.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: b("lk/1f41")})
	f.rec("unlock again", ul, err)
	cp, err := f.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b("el"), Lease: 8001, Value: b("a")})
	f.rec("campaign", cp, err)
	var leader *v3electionpb.LeaderKey
	if err == nil {
		leader = cp.Leader
	}
	ld, err := f.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b("el")})
	f.rec("leader", ld, err)
	ld, err = f.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b("none")})
	f.rec("leader of an empty election", ld, err)
	pc, err := f.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: leader, Value: b("b")})
	f.rec("proclaim", pc, err)
	pc, err = f.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{Name: b("el"), Key: b("el/9"), Lease: 8002}, Value: b("b")})
	f.rec("proclaim by a non-leader", pc, err)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ob, err := f.elect.Observe(octx, &v3electionpb.LeaderRequest{Name: b("el")})
	must(f.t, "observe", err)
	or, err := ob.Recv()
	f.rec("observe", or, err)
	rs, err := f.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: leader})
	f.rec("resign", rs, err)
	rs, err = f.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: leader})
	f.rec("resign again", rs, err)
}

// TestRPCFields: every RPC's whole answer, etcd's and the store's, on fresh servers.
func TestRPCFields(t *testing.T) {
	tr := transcripts{}
	// etcd's default quota: the store's default is a share of the machine's memory.
	forEachDedicated(t, serverOpts{QuotaBytes: 2 << 30}, func(t *testing.T, tg *target) {
		f := newFieldSide(t, tg, tr)
		f.kv()
		f.watch()
		f.lease()
		f.lockElection()
		f.cluster()
		f.maintenance()
		f.authRPCs()
		f.tr.note(tg, "end")
	})
	tr.compare(t)
}
