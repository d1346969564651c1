package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

func TestLease(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		base := 0x1ea5e000 + curRev(t, tg)*16
		g, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: base, TTL: 300})
		must(t, "grant with id", err)
		if g.ID != base || g.TTL != 300 || g.Error != "" {
			t.Errorf("grant: %v", g)
		}
		_, err = tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: base, TTL: 300})
		wantErr(t, "grant existing id", err, codes.FailedPrecondition, "etcdserver: lease already exists")
		auto, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 300})
		must(t, "grant without id", err)
		if auto.ID <= 0 {
			t.Errorf("server-chosen lease id %d", auto.ID)
		}
		_, err = tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: base + 1, TTL: 9000000000000})
		wantErr(t, "grant huge ttl", err, codes.OutOfRange, "etcdserver: too large lease TTL")

		// keys attached
		for _, k := range []string{"a", "b"} {
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + k), Value: b("v"), Lease: base})
			must(t, "put with lease", err)
		}
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "free"), Value: b("v")})
		must(t, "put", err)
		ttl, err := tg.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: base, Keys: true})
		must(t, "time to live", err)
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		if ttl.ID != base || ttl.GrantedTTL != 300 || ttl.TTL < 290 || ttl.TTL > 300 || len(keys) != 2 || keys[0] != p+"a" || keys[1] != p+"b" {
			t.Errorf("time to live: %v", ttl)
		}
		ttl, err = tg.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: base})
		must(t, "time to live without keys", err)
		if len(ttl.Keys) != 0 {
			t.Errorf("keys without asking: %v", ttl.Keys)
		}
		ttl, err = tg.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: base + 5, Keys: true})
		must(t, "time to live of unknown lease", err)
		if ttl.TTL != -1 || ttl.ID != base+5 || ttl.GrantedTTL != 0 {
			t.Errorf("time to live of unknown lease: %v (want TTL -1)", ttl)
		}
		// leases
		ls, err := tg.Lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		must(t, "leases", err)
		found := map[int64]bool{}
		for _, l := range ls.Leases {
			found[l.ID] = true
		}
		if !found[base] || !found[auto.ID] {
			t.Errorf("leases %v lack %d or %d", ls.Leases, base, auto.ID)
		}
		// keepalive
		ka, err := tg.Cli.KeepAliveOnce(ctx, clientv3.LeaseID(base))
		must(t, "keepalive once", err)
		if ka.ID != clientv3.LeaseID(base) || ka.TTL != 300 {
			t.Errorf("keepalive: %v", ka)
		}
		kctx, kcancel := context.WithCancel(ctx)
		kch, err := tg.Cli.KeepAlive(kctx, clientv3.LeaseID(auto.ID))
		must(t, "keepalive stream", err)
		select {
		case r := <-kch:
			if r == nil || r.TTL != 300 {
				t.Errorf("keepalive stream: %v", r)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("no keepalive response in 5s")
		}
		kcancel()
		_, err = tg.Cli.KeepAliveOnce(ctx, clientv3.LeaseID(base+5))
		if err != rpcLeaseNotFound() {
			t.Errorf("keepalive of unknown lease: %v", err)
		}
		// revoke deletes the keys in one revision, with watch events
		w := openRawWatch(t, tg)
		w.create(&pb.WatchCreateRequest{Key: b(p), RangeEnd: prefixEnd(p), PrevKv: true})
		rv, err := tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: base})
		must(t, "revoke", err)
		evs := w.events(2)
		var all []*mvccpb.Event
		for _, e := range evs {
			all = append(all, e...)
		}
		for _, ev := range all {
			if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision != rv.Header.Revision || ev.PrevKv == nil || ev.PrevKv.Lease != base {
				t.Errorf("revoke event: %v (revoke at revision %d)", ev, rv.Header.Revision)
			}
		}
		gr, _ := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p)})
		if len(gr.Kvs) != 1 || string(gr.Kvs[0].Key) != p+"free" {
			t.Errorf("after revoke: %v", gr.Kvs)
		}
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: base})
		wantErr(t, "revoke again", err, codes.NotFound, "etcdserver: requested lease not found")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "c"), Value: b("v"), Lease: base})
		wantErr(t, "put with revoked lease", err, codes.NotFound, "etcdserver: requested lease not found")
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: auto.ID})
		must(t, "revoke auto", err)
	})
}

func TestLeaseExpiry(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		id := 0x3e0000 + curRev(t, tg)
		g, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 2})
		must(t, "grant", err)
		if g.TTL != 2 {
			t.Errorf("granted TTL %d, want 2", g.TTL)
		}
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "ev"), Value: b("v"), Lease: id})
		must(t, "put", err)
		w := openRawWatch(t, tg)
		w.create(&pb.WatchCreateRequest{Key: b(p + "ev")})
		start := time.Now()
		var ev *pb.WatchResponse
		select {
		case ev = <-w.ch:
		case <-time.After(10 * time.Second):
		}
		if ev == nil || len(ev.Events) != 1 || ev.Events[0].Type != mvccpb.DELETE {
			t.Fatalf("no DELETE event within 10s of a 2s lease expiring: %v", ev)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("lease expired after %v, TTL 2s", d)
		}
		gr, _ := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "ev")})
		if len(gr.Kvs) != 0 {
			t.Errorf("key still there after expiry")
		}
		ttl, err := tg.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
		must(t, "ttl", err)
		if ttl.TTL != -1 {
			t.Errorf("expired lease TTL %d, want -1", ttl.TTL)
		}
	})
}
