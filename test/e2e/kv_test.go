package e2e

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
)

func putOp(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(k), Value: b(v)}}}
}
func getOp(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: b(k)}}}
}
func delOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: b(k), RangeEnd: b(end)}}}
}
func txnOp(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

func wantKeys(t *testing.T, what string, kvs []*mvccpbKV, want ...string) {
	t.Helper()
	got := keysOf(kvs)
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: keys %q, want %q", what, got, want)
	}
}

func TestKVRange(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		put := func(k, v string) int64 {
			r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + k), Value: b(v)})
			must(t, "put "+k, err)
			return r.Header.Revision
		}
		r0 := put("a", "3")
		put("b", "1")
		put("c", "2")
		put("d/1", "x")
		put("d/2", "y")
		r5 := put("e", "0")
		put("a", "9") // a: version 2
		r7 := put("b", "8")

		rng := func(req *pb.RangeRequest) *pb.RangeResponse {
			t.Helper()
			r, err := tg.KV.Range(ctx, req)
			must(t, fmt.Sprintf("range %v", req), err)
			return r
		}
		// single key
		r := rng(&pb.RangeRequest{Key: b(p + "a")})
		wantKeys(t, "single", r.Kvs, p+"a")
		if r.Count != 1 || r.More || string(r.Kvs[0].Value) != "9" || r.Kvs[0].Version != 2 || r.Kvs[0].CreateRevision != r0 || r.Kvs[0].ModRevision != r0+6 {
			t.Errorf("single: %v", r)
		}
		if r.Header.Revision != r7 {
			t.Errorf("header revision %d, want %d", r.Header.Revision, r7)
		}
		// missing key
		r = rng(&pb.RangeRequest{Key: b(p + "zz")})
		if len(r.Kvs) != 0 || r.Count != 0 || r.More {
			t.Errorf("missing key: %v", r)
		}
		// prefix
		r = rng(&pb.RangeRequest{Key: b(p + "d/"), RangeEnd: prefixEnd(p + "d/")})
		wantKeys(t, "prefix", r.Kvs, p+"d/1", p+"d/2")
		// [a, c)
		r = rng(&pb.RangeRequest{Key: b(p + "a"), RangeEnd: b(p + "c")})
		wantKeys(t, "interval", r.Kvs, p+"a", p+"b")
		// from key: everything >= key
		r = rng(&pb.RangeRequest{Key: b(p + "c"), RangeEnd: []byte{0}})
		var mine []string
		for _, kv := range r.Kvs {
			if string(kv.Key) < p+"c" {
				t.Errorf("from-key returned %q < %q", kv.Key, p+"c")
			}
			if strings.HasPrefix(string(kv.Key), p) {
				mine = append(mine, string(kv.Key))
			}
		}
		if !reflect.DeepEqual(mine, []string{p + "c", p + "d/1", p + "d/2", p + "e"}) {
			t.Errorf("from-key: %q", mine)
		}
		if r.Count != int64(len(r.Kvs)) {
			t.Errorf("from-key count %d, kvs %d", r.Count, len(r.Kvs))
		}
		// all keys: key "\x00", range_end "\x00"
		all := rng(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true})
		if all.Count < 6 {
			t.Errorf("all keys count %d", all.Count)
		}
		// limit, more, count
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Limit: 2})
		wantKeys(t, "limit", r.Kvs, p+"a", p+"b")
		if !r.More || r.Count != 6 {
			t.Errorf("limit 2: more=%v count=%d, want true 6", r.More, r.Count)
		}
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Limit: 6})
		if r.More || r.Count != 6 || len(r.Kvs) != 6 {
			t.Errorf("limit 6: more=%v count=%d kvs=%d", r.More, r.Count, len(r.Kvs))
		}
		// paging like kube-apiserver: continue from last key + \x00
		var paged []string
		start := p
		for i := 0; i < 10; i++ {
			r = rng(&pb.RangeRequest{Key: b(start), RangeEnd: prefixEnd(p), Limit: 2, Revision: r7})
			paged = append(paged, keysOf(r.Kvs)...)
			if !r.More {
				break
			}
			start = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
		}
		if len(paged) != 6 {
			t.Errorf("paged list: %q", paged)
		}
		// revision in the past
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: r5})
		if len(r.Kvs) != 6 || string(r.Kvs[0].Value) != "3" || r.Kvs[0].Version != 1 || r.Header.Revision != r7 {
			t.Errorf("at revision %d: %v", r5, r)
		}
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: r0})
		wantKeys(t, "at first revision", r.Kvs, p+"a")
		// sort
		pk := func(req *pb.RangeRequest) []string {
			req.Key, req.RangeEnd = b(p), prefixEnd(p)
			return keysOf(rng(req).Kvs)
		}
		s := func(ks ...string) []string {
			for i := range ks {
				ks[i] = p + ks[i]
			}
			return ks
		}
		cases := []struct {
			req  *pb.RangeRequest
			want []string
		}{
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND}, s("e", "d/2", "d/1", "c", "b", "a")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_MOD}, s("c", "d/1", "d/2", "e", "a", "b")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD}, s("b", "a", "e", "d/2", "d/1", "c")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_CREATE}, s("e", "d/2", "d/1", "c", "b", "a")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_VALUE}, s("e", "c", "b", "a", "d/1", "d/2")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE}, s("d/2", "d/1", "a", "b", "c", "e")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_NONE, SortTarget: pb.RangeRequest_VALUE}, s("e", "c", "b", "a", "d/1", "d/2")}, // NONE with a target means ascend
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VERSION, Limit: 2}, nil},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD, Limit: 3}, s("b", "a", "e")},
			{&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND, Limit: 2}, s("e", "d/2")},
		}
		for i, c := range cases {
			got := pk(c.req)
			if c.want == nil { // versions: a and b have 2, both first in some order
				sort.Strings(got)
				c.want = s("a", "b")
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("sort case %d (%v/%v limit %d): %q, want %q", i, c.req.SortOrder, c.req.SortTarget, c.req.Limit, got, c.want)
			}
		}
		// keys_only, count_only
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), KeysOnly: true})
		for _, kv := range r.Kvs {
			if len(kv.Value) != 0 || kv.ModRevision == 0 {
				t.Errorf("keys_only: %v", kv)
			}
		}
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), CountOnly: true})
		if len(r.Kvs) != 0 || r.Count != 6 {
			t.Errorf("count_only: %v", r)
		}
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), CountOnly: true, Limit: 1})
		if len(r.Kvs) != 0 || r.Count != 6 {
			t.Errorf("count_only limit 1: %v", r)
		}
		// min/max mod/create revision
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), MinModRevision: r5})
		wantKeys(t, "min_mod", r.Kvs, p+"a", p+"b", p+"e")
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), MaxModRevision: r0 + 3})
		wantKeys(t, "max_mod", r.Kvs, p+"c", p+"d/1")
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), MinCreateRevision: r0 + 1, MaxCreateRevision: r0 + 2})
		wantKeys(t, "create window", r.Kvs, p+"b", p+"c")
		if r.Count != 6 {
			t.Errorf("count with filters is the count before filtering in etcd: %d, want 6", r.Count)
		}
		// serializable
		r = rng(&pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Serializable: true})
		if len(r.Kvs) != 6 {
			t.Errorf("serializable: %d kvs", len(r.Kvs))
		}
		// range_end < key: empty, not an error
		r = rng(&pb.RangeRequest{Key: b(p + "e"), RangeEnd: b(p + "a")})
		if len(r.Kvs) != 0 || r.Count != 0 {
			t.Errorf("range_end < key: %v", r)
		}
		// invalid sort
		_, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), SortOrder: 7})
		wantErr(t, "bad sort order", err, codes.InvalidArgument, "etcdserver: invalid sort option")
		_, err = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), SortTarget: 9})
		wantErr(t, "bad sort target", err, codes.InvalidArgument, "etcdserver: invalid sort option")
		// future revision
		_, err = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), Revision: r7 + 1000})
		wantErr(t, "future revision", err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
	})
}

func TestKVPut(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		k := b(p + "k")
		r1, err := tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("v1"), PrevKv: true})
		must(t, "put", err)
		if r1.PrevKv != nil {
			t.Errorf("prev_kv of a new key: %v", r1.PrevKv)
		}
		r2, err := tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("v2"), PrevKv: true})
		must(t, "put", err)
		if r2.Header.Revision != r1.Header.Revision+1 {
			t.Errorf("revision %d after %d", r2.Header.Revision, r1.Header.Revision)
		}
		if pk := r2.PrevKv; pk == nil || string(pk.Value) != "v1" || pk.Version != 1 || pk.ModRevision != r1.Header.Revision || pk.CreateRevision != r1.Header.Revision {
			t.Errorf("prev_kv: %v", pk)
		}
		r3, err := tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("v3")})
		must(t, "put", err)
		if r3.PrevKv != nil {
			t.Errorf("prev_kv without asking: %v", r3.PrevKv)
		}
		// lease
		lid := int64(0x5e0000) + r3.Header.Revision
		_, err = tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: lid, TTL: 600})
		must(t, "grant", err)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("v4"), Lease: lid})
		must(t, "put with lease", err)
		// ignore_value keeps value, may change lease
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, IgnoreValue: true})
		must(t, "put ignore_value", err)
		g, _ := tg.KV.Range(ctx, &pb.RangeRequest{Key: k})
		if kv := g.Kvs[0]; string(kv.Value) != "v4" || kv.Lease != 0 || kv.Version != 5 {
			t.Errorf("after ignore_value (lease 0): %v", kv)
		}
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, IgnoreValue: true, Lease: lid})
		must(t, "put ignore_value lease", err)
		// ignore_lease keeps lease
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("v5"), IgnoreLease: true})
		must(t, "put ignore_lease", err)
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: k})
		if kv := g.Kvs[0]; string(kv.Value) != "v5" || kv.Lease != lid || kv.Version != 7 {
			t.Errorf("after ignore_lease: %v (lease want %d)", kv, lid)
		}
		// both ignores: touches the key
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, IgnoreValue: true, IgnoreLease: true})
		must(t, "put ignore both", err)
		// errors
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("x"), IgnoreValue: true})
		wantErr(t, "ignore_value with value", err, codes.InvalidArgument, "etcdserver: value is provided")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, Lease: lid, IgnoreLease: true})
		wantErr(t, "ignore_lease with lease", err, codes.InvalidArgument, "etcdserver: lease is provided")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "missing"), IgnoreValue: true})
		wantErr(t, "ignore_value on missing key", err, codes.InvalidArgument, "etcdserver: key not found")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "missing"), Value: b("x"), IgnoreLease: true})
		wantErr(t, "ignore_lease on missing key", err, codes.InvalidArgument, "etcdserver: key not found")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: k, Value: b("x"), Lease: 0x7ead})
		wantErr(t, "unknown lease", err, codes.NotFound, "etcdserver: requested lease not found")
		// empty value is a value
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "empty")})
		must(t, "empty value", err)
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "empty")})
		if len(g.Kvs) != 1 || len(g.Kvs[0].Value) != 0 {
			t.Errorf("empty value: %v", g)
		}
		// binary keys and values
		bk := append(b(p), 0, 0xff, 0xfe, '/', 1)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: bk, Value: []byte{0, 1, 2, 0xff}})
		must(t, "binary put", err)
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: bk})
		if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "\x00\x01\x02\xff" {
			t.Errorf("binary: %v", g)
		}
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lid})
		must(t, "revoke", err)
	})
}

func TestKVDeleteRange(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + k), Value: b("v" + k)})
			must(t, "put", err)
		}
		rev := curRev(t, tg)
		d, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "zz")})
		must(t, "delete missing", err)
		if d.Deleted != 0 || d.Header.Revision != rev {
			t.Errorf("delete missing: deleted=%d rev=%d (want 0, %d)", d.Deleted, d.Header.Revision, rev)
		}
		d, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "a"), PrevKv: true})
		must(t, "delete single", err)
		if d.Deleted != 1 || d.Header.Revision != rev+1 || len(d.PrevKvs) != 1 || string(d.PrevKvs[0].Value) != "va" {
			t.Errorf("delete single: %v", d)
		}
		d, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "b"), RangeEnd: b(p + "d")})
		must(t, "delete range", err)
		if d.Deleted != 2 || d.Header.Revision != rev+2 || len(d.PrevKvs) != 0 {
			t.Errorf("delete range: %v", d)
		}
		d, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "e"), RangeEnd: b(p + "a")})
		must(t, "delete range_end<key", err)
		if d.Deleted != 0 {
			t.Errorf("delete range_end<key deleted %d", d.Deleted)
		}
		d, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p), RangeEnd: prefixEnd(p), PrevKv: true})
		must(t, "delete prefix", err)
		if d.Deleted != 2 || len(d.PrevKvs) != 2 || string(d.PrevKvs[0].Key) != p+"d" || string(d.PrevKvs[1].Key) != p+"e" {
			t.Errorf("delete prefix: %v", d)
		}
		// the deleted keys are still visible at the old revision, recreated keys start at version 1
		g, _ := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: rev})
		if len(g.Kvs) != 5 {
			t.Errorf("old revision after delete: %d kvs", len(g.Kvs))
		}
		pr, _ := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "a"), Value: b("again")})
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "a")})
		if kv := g.Kvs[0]; kv.Version != 1 || kv.CreateRevision != pr.Header.Revision {
			t.Errorf("recreated key: %v", kv)
		}
		_, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{})
		wantErr(t, "delete empty key", err, codes.InvalidArgument, "etcdserver: key is not provided")
	})
}

func TestTxn(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		lid := int64(0x7a0000) + curRev(t, tg)
		_, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: lid, TTL: 600})
		must(t, "grant", err)
		defer tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lid})
		r1, _ := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "a"), Value: b("m")})
		_, _ = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "a"), Value: b("m")})
		r3, _ := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "b"), Value: b("x"), Lease: lid})
		A, B, Z := p+"a", p+"b", p+"zz" // a: version 2, create r1, mod r1+1, value "m"; b: leased

		cmp := func(key string, target pb.Compare_CompareTarget, res pb.Compare_CompareResult, v any) *pb.Compare {
			c := &pb.Compare{Key: b(key), Target: target, Result: res}
			switch target {
			case pb.Compare_VALUE:
				c.TargetUnion = &pb.Compare_Value{Value: b(v.(string))}
			case pb.Compare_VERSION:
				c.TargetUnion = &pb.Compare_Version{Version: v.(int64)}
			case pb.Compare_CREATE:
				c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: v.(int64)}
			case pb.Compare_MOD:
				c.TargetUnion = &pb.Compare_ModRevision{ModRevision: v.(int64)}
			case pb.Compare_LEASE:
				c.TargetUnion = &pb.Compare_Lease{Lease: v.(int64)}
			}
			return c
		}
		E, N, L, G := pb.Compare_EQUAL, pb.Compare_NOT_EQUAL, pb.Compare_LESS, pb.Compare_GREATER
		cases := []struct {
			name string
			c    *pb.Compare
			want bool
		}{
			{"value=", cmp(A, pb.Compare_VALUE, E, "m"), true},
			{"value!=", cmp(A, pb.Compare_VALUE, N, "m"), false},
			{"value<", cmp(A, pb.Compare_VALUE, L, "n"), true},
			{"value>", cmp(A, pb.Compare_VALUE, G, "n"), false},
			{"value= missing key", cmp(Z, pb.Compare_VALUE, E, ""), false},
			{"value!= missing key", cmp(Z, pb.Compare_VALUE, N, ""), false},
			{"version=", cmp(A, pb.Compare_VERSION, E, int64(2)), true},
			{"version>", cmp(A, pb.Compare_VERSION, G, int64(1)), true},
			{"version<", cmp(A, pb.Compare_VERSION, L, int64(2)), false},
			{"version!=", cmp(A, pb.Compare_VERSION, N, int64(3)), true},
			{"version=0 missing", cmp(Z, pb.Compare_VERSION, E, int64(0)), true},
			{"create=", cmp(A, pb.Compare_CREATE, E, r1.Header.Revision), true},
			{"create<", cmp(A, pb.Compare_CREATE, L, r1.Header.Revision), false},
			{"create=0 missing", cmp(Z, pb.Compare_CREATE, E, int64(0)), true},
			{"mod=", cmp(A, pb.Compare_MOD, E, r1.Header.Revision+1), true},
			{"mod>", cmp(A, pb.Compare_MOD, G, r1.Header.Revision), true},
			{"mod!=", cmp(A, pb.Compare_MOD, N, r1.Header.Revision+1), false},
			{"mod=0 missing (kube create)", cmp(Z, pb.Compare_MOD, E, int64(0)), true},
			{"mod=0 existing", cmp(A, pb.Compare_MOD, E, int64(0)), false},
			{"lease=", cmp(B, pb.Compare_LEASE, E, lid), true},
			{"lease!=", cmp(B, pb.Compare_LEASE, N, lid), false},
			{"lease=0 unleased", cmp(A, pb.Compare_LEASE, E, int64(0)), true},
			{"lease>", cmp(B, pb.Compare_LEASE, G, int64(0)), true},
			{"lease=0 missing", cmp(Z, pb.Compare_LEASE, E, int64(0)), true},
		}
		for _, c := range cases {
			r, err := tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{c.c}})
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			if r.Succeeded != c.want {
				t.Errorf("compare %s: succeeded=%v, want %v", c.name, r.Succeeded, c.want)
			}
		}
		// compares over a range: all keys in [a, c) must satisfy
		rc := cmp(A, pb.Compare_VERSION, G, int64(0))
		rc.RangeEnd = b(p + "c")
		r, err := tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{rc}})
		must(t, "range compare", err)
		if !r.Succeeded {
			t.Errorf("range compare version>0 over [a,c) failed")
		}
		rc = cmp(A, pb.Compare_VERSION, E, int64(2))
		rc.RangeEnd = prefixEnd(p)
		r, _ = tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{rc}})
		if r.Succeeded {
			t.Errorf("range compare version=2 over prefix succeeded (b has version 1)")
		}
		// several compares: all must hold
		r, _ = tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{cmp(A, pb.Compare_VALUE, E, "m"), cmp(B, pb.Compare_VALUE, E, "nope")}})
		if r.Succeeded {
			t.Errorf("two compares, one false: succeeded")
		}
		// kube-apiserver shapes
		cre, err := tg.KV.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmp(p+"pod", pb.Compare_MOD, E, int64(0))},
			Success: []*pb.RequestOp{putOp(p+"pod", "v1")},
		})
		must(t, "kube create", err)
		if !cre.Succeeded || cre.Responses[0].GetResponsePut() == nil || cre.Responses[0].GetResponsePut().Header.Revision != cre.Header.Revision {
			t.Errorf("kube create: %v", cre)
		}
		upd, err := tg.KV.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmp(p+"pod", pb.Compare_MOD, E, cre.Header.Revision-1)},
			Success: []*pb.RequestOp{putOp(p+"pod", "v2")},
			Failure: []*pb.RequestOp{getOp(p + "pod")},
		})
		must(t, "kube stale update", err)
		if upd.Succeeded || upd.Header.Revision != cre.Header.Revision {
			t.Errorf("stale update succeeded or moved revision: %v", upd)
		} else if g := upd.Responses[0].GetResponseRange(); g == nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "v1" || g.Kvs[0].ModRevision != cre.Header.Revision {
			t.Errorf("stale update: failure get: %v", upd.Responses)
		}
		del, err := tg.KV.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmp(p+"pod", pb.Compare_MOD, E, cre.Header.Revision)},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: b(p + "pod"), PrevKv: true}}}},
			Failure: []*pb.RequestOp{getOp(p + "pod")},
		})
		must(t, "kube delete", err)
		if d := del.Responses[0].GetResponseDeleteRange(); !del.Succeeded || d == nil || d.Deleted != 1 || len(d.PrevKvs) != 1 {
			t.Errorf("kube delete: %v", del)
		}
		// multi-op txn: all ops see one revision, reads see earlier writes of the same txn
		m, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"m1", "1"), putOp(p+"m2", "2"), getOp(p + "m1"), delOp(p+"a", "")}})
		must(t, "multi-op", err)
		if m.Header.Revision != del.Header.Revision+1 {
			t.Errorf("multi-op txn revision %d, want %d", m.Header.Revision, del.Header.Revision+1)
		}
		if g := m.Responses[2].GetResponseRange(); g == nil || len(g.Kvs) != 1 || g.Kvs[0].ModRevision != m.Header.Revision {
			t.Errorf("read inside txn: %v", m.Responses[2])
		}
		// read-only txn does not move the revision
		ro, _ := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp(p + "m1")}})
		if ro.Header.Revision != m.Header.Revision {
			t.Errorf("read-only txn moved revision to %d", ro.Header.Revision)
		}
		// nested txn
		n, err := tg.KV.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmp(p+"m1", pb.Compare_VALUE, E, "1")},
			Success: []*pb.RequestOp{
				txnOp(&pb.TxnRequest{
					Compare: []*pb.Compare{cmp(p+"m2", pb.Compare_VALUE, E, "nope")},
					Success: []*pb.RequestOp{putOp(p+"n1", "s")},
					Failure: []*pb.RequestOp{putOp(p+"n1", "f"), getOp(p + "n1")},
				}),
				putOp(p+"n2", "x"),
			},
		})
		must(t, "nested", err)
		inner := n.Responses[0].GetResponseTxn()
		if !n.Succeeded || inner == nil || inner.Succeeded || len(inner.Responses) != 2 || n.Responses[1].GetResponsePut() == nil {
			t.Errorf("nested: %v", n)
		} else if g := inner.Responses[1].GetResponseRange(); g == nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "f" {
			t.Errorf("nested read: %v", inner.Responses[1])
		}
		// duplicate keys
		dup := "etcdserver: duplicate key given in txn request"
		for name, tr := range map[string]*pb.TxnRequest{
			"two puts":                 {Success: []*pb.RequestOp{putOp(p+"d", "1"), putOp(p+"d", "2")}},
			"put and delete":           {Success: []*pb.RequestOp{putOp(p+"d", "1"), delOp(p+"d", "")}},
			"put inside deleted range": {Failure: []*pb.RequestOp{delOp(p+"c", p+"e"), putOp(p+"d", "2")}},
			"put and nested put":       {Success: []*pb.RequestOp{putOp(p+"d", "1"), txnOp(&pb.TxnRequest{Failure: []*pb.RequestOp{putOp(p+"d", "2")}})}},
			"two nested txns same key": {Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"d", "1")}}), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"d", "2")}})}},
		} {
			_, err := tg.KV.Txn(ctx, tr)
			wantErr(t, "duplicate "+name, err, codes.InvalidArgument, dup)
		}
		for name, tr := range map[string]*pb.TxnRequest{
			"same key in success and failure": {Success: []*pb.RequestOp{putOp(p+"d", "1")}, Failure: []*pb.RequestOp{putOp(p+"d", "2")}},
			"put and get same key":            {Success: []*pb.RequestOp{putOp(p+"d", "1"), getOp(p + "d")}},
			"two deletes same key":            {Success: []*pb.RequestOp{delOp(p+"d", ""), delOp(p+"d", "")}},
			"nested success/failure same key": {Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"d", "1")}, Failure: []*pb.RequestOp{putOp(p+"d", "2")}})}},
		} {
			if _, err := tg.KV.Txn(ctx, tr); err != nil {
				t.Errorf("%s: should be allowed, got %v", name, err)
			}
		}
		// too many ops (etcd's default --max-txn-ops is 128)
		var many []*pb.RequestOp
		for i := 0; i < 129; i++ {
			many = append(many, putOp(fmt.Sprintf("%smany/%03d", p, i), "v"))
		}
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: many})
		wantErr(t, "129 ops", err, codes.InvalidArgument, "etcdserver: too many operations in txn request")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: many[:128]})
		must(t, "128 ops", err)
		// errors inside txns
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Key: nil}}})
		wantErr(t, "compare with empty key", err, codes.InvalidArgument, "etcdserver: key is not provided")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("", "v")}})
		wantErr(t, "put empty key in txn", err, codes.InvalidArgument, "etcdserver: key is not provided")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(p + "l"), Lease: 0x7ead}}}}})
		wantErr(t, "put unknown lease in txn", err, codes.NotFound, "etcdserver: requested lease not found")
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: b(p), Revision: r3.Header.Revision + 100000}}}}})
		wantErr(t, "future revision in txn", err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
		// a failed txn changes nothing
		before := curRev(t, tg)
		_, _ = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"atomic", "1"), putOp(p+"atomic2", "2"), {Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(p + "l"), Lease: 0x7ead}}}}})
		if after := curRev(t, tg); after != before {
			t.Errorf("failed txn moved the revision %d -> %d", before, after)
		}
		if g, _ := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "atomic")}); len(g.Kvs) != 0 {
			t.Errorf("failed txn left a write behind")
		}
	})
}

func TestCompact(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		var revs []int64
		for i := 0; i < 5; i++ {
			r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "k"), Value: b(fmt.Sprint(i))})
			must(t, "put", err)
			revs = append(revs, r.Header.Revision)
		}
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "gone"), Value: b("x")})
		must(t, "put", err)
		dr, _ := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "gone")})
		last := dr.Header.Revision
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: last + 10})
		wantErr(t, "compact future", err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
		cr, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: revs[2]})
		must(t, "compact", err)
		if cr.Header == nil || cr.Header.Revision != last {
			t.Errorf("compact header: %v, want revision %d", cr.Header, last)
		}
		const compacted = "etcdserver: mvcc: required revision has been compacted"
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: revs[2]})
		wantErr(t, "compact same revision again", err, codes.OutOfRange, compacted)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: revs[1]})
		wantErr(t, "compact older revision", err, codes.OutOfRange, compacted)
		_, err = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "k"), Revision: revs[1]})
		wantErr(t, "range at compacted revision", err, codes.OutOfRange, compacted)
		g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "k"), Revision: revs[2]})
		must(t, "range at the compaction revision", err)
		if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "2" || g.Kvs[0].Version != 3 {
			t.Errorf("range at compaction revision: %v", g)
		}
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: b(p + "k"), Revision: revs[0]}}}}})
		wantErr(t, "txn range at compacted revision", err, codes.OutOfRange, compacted)
		// physical compaction waits until it is done
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: last, Physical: true})
		must(t, "physical compact", err)
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "k")})
		if len(g.Kvs) != 1 || g.Kvs[0].Version != 5 || g.Kvs[0].CreateRevision != revs[0] {
			t.Errorf("latest after compaction: %v (version and create revision survive)", g)
		}
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "gone"), Revision: last})
		if len(g.Kvs) != 0 {
			t.Errorf("deleted key visible after compaction")
		}
		// the kube-apiserver compaction dance
		ck := "compact_rev_key"
		g, _ = tg.KV.Range(ctx, &pb.RangeRequest{Key: b(ck)})
		var ver int64
		if len(g.Kvs) > 0 {
			ver = g.Kvs[0].Version
		}
		tr, err := tg.KV.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: b(ck), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: ver}}},
			Success: []*pb.RequestOp{putOp(ck, fmt.Sprint(last))},
			Failure: []*pb.RequestOp{getOp(ck)},
		})
		must(t, "compact txn", err)
		if !tr.Succeeded {
			t.Errorf("kube compaction txn failed: %v", tr)
		}
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: tr.Header.Revision})
		must(t, "compact at latest", err)
	})
}
