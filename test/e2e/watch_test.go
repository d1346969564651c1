package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rawWatch is one gRPC watch stream read in the background.
type rawWatch struct {
	t    *testing.T
	ws   pb.Watch_WatchClient
	ch   chan *pb.WatchResponse
	errc chan error
	// responses that arrived while create waited for its created response (events of
	// watches created earlier on the stream may come first)
	pending []*pb.WatchResponse
}

func openRawWatch(t *testing.T, tg *target) *rawWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return openRawWatchCtx(t, tg, ctx)
}

// openRawWatchCtx opens the stream under ctx: cancelling it is the client going away.
func openRawWatchCtx(t *testing.T, tg *target, ctx context.Context) *rawWatch {
	t.Helper()
	ws, err := tg.Watch.Watch(ctx)
	must(t, "open watch stream", err)
	w := &rawWatch{t: t, ws: ws, ch: make(chan *pb.WatchResponse, 1024), errc: make(chan error, 1)}
	go func() {
		for {
			r, err := ws.Recv()
			if err != nil {
				w.errc <- err
				return
			}
			w.ch <- r
		}
	}()
	return w
}

func (w *rawWatch) create(req *pb.WatchCreateRequest) *pb.WatchResponse {
	w.t.Helper()
	must(w.t, "send create", w.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}))
	for i := 0; i < 100; i++ {
		r := w.recv("created response")
		if r.Created {
			return r
		}
		w.pending = append(w.pending, r)
	}
	w.t.Fatalf("no created response")
	return nil
}

func (w *rawWatch) next(what string) *pb.WatchResponse {
	w.t.Helper()
	if len(w.pending) > 0 {
		r := w.pending[0]
		w.pending = w.pending[1:]
		return r
	}
	return w.recv(what)
}

func (w *rawWatch) recv(what string) *pb.WatchResponse {
	w.t.Helper()
	select {
	case r := <-w.ch:
		return r
	case err := <-w.errc:
		w.t.Fatalf("%s: watch stream error: %v", what, err)
	case <-time.After(5 * time.Second):
		w.t.Fatalf("%s: nothing received in 5s", what)
	}
	return nil
}

// events collects n events (of any watch on the stream), keyed by watch id.
func (w *rawWatch) events(n int) map[int64][]*mvccpb.Event {
	w.t.Helper()
	out := map[int64][]*mvccpb.Event{}
	got := 0
	for got < n {
		r := w.next(fmt.Sprintf("event %d of %d", got+1, n))
		if r.Canceled || r.Created {
			w.t.Fatalf("unexpected response while waiting for events: %v", r)
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision > r.Header.Revision {
				w.t.Errorf("event at revision %d in a response with header revision %d", ev.Kv.ModRevision, r.Header.Revision)
			}
		}
		out[r.WatchId] = append(out[r.WatchId], r.Events...)
		got += len(r.Events)
	}
	return out
}

func (w *rawWatch) quiet(d time.Duration) {
	w.t.Helper()
	select {
	case r := <-w.ch:
		w.t.Errorf("unexpected watch response: %v", r)
	case <-time.After(d):
	}
}

func evStr(evs []*mvccpb.Event) string {
	var parts []string
	for _, ev := range evs {
		s := fmt.Sprintf("%s %s=%s@%d", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
		if ev.PrevKv != nil {
			s += fmt.Sprintf("(prev %s@%d)", ev.PrevKv.Value, ev.PrevKv.ModRevision)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func TestWatch(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		put := func(k, v string) int64 {
			r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + k), Value: b(v)})
			must(t, "put", err)
			return r.Header.Revision
		}
		del := func(k string) int64 {
			r, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + k)})
			must(t, "delete", err)
			return r.Header.Revision
		}

		t.Run("multiplexed", func(t *testing.T) {
			w := openRawWatch(t, tg)
			c1 := w.create(&pb.WatchCreateRequest{Key: b(p + "m/a")})
			c2 := w.create(&pb.WatchCreateRequest{Key: b(p + "m/"), RangeEnd: prefixEnd(p + "m/"), PrevKv: true})
			c3 := w.create(&pb.WatchCreateRequest{Key: b(p + "m/b"), WatchId: 777})
			if c1.WatchId == c2.WatchId || c3.WatchId != 777 {
				t.Errorf("watch ids %d %d %d (want distinct, client-chosen 777)", c1.WatchId, c2.WatchId, c3.WatchId)
			}
			r1 := put("m/a", "1")
			put("m/b", "2")
			put("m/a", "3")
			r4 := del("m/a")
			put("other", "x")
			got := w.events(3 + 4 + 1) // watch 1: 3 events, watch 2: 4, watch 777: 1
			if s := evStr(got[c1.WatchId]); s != fmt.Sprintf("PUT %sm/a=1@%d; PUT %sm/a=3@%d; DELETE %sm/a=@%d", p, r1, p, r1+2, p, r4) {
				t.Errorf("watch 1 events: %s", s)
			}
			if s := evStr(got[c2.WatchId]); s != fmt.Sprintf("PUT %sm/a=1@%d; PUT %sm/b=2@%d; PUT %sm/a=3@%d(prev 1@%d); DELETE %sm/a=@%d(prev 3@%d)", p, r1, p, r1+1, p, r1+2, r1, p, r4, r1+2) {
				t.Errorf("watch 2 (prefix, prev_kv) events: %s", s)
			}
			if s := evStr(got[c3.WatchId]); s != fmt.Sprintf("PUT %sm/b=2@%d", p, r1+1) {
				t.Errorf("watch 777 events: %s", s)
			}
			// cancel one watch: it gets a canceled response and no more events
			must(t, "cancel", w.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: c1.WatchId}}}))
			cr := w.next("cancel response")
			if !cr.Canceled || cr.WatchId != c1.WatchId {
				t.Errorf("cancel response: %v", cr)
			}
			put("m/a", "5")
			e := w.events(1)
			if len(e[c1.WatchId]) != 0 || len(e[c2.WatchId]) != 1 {
				t.Errorf("after cancel: %v", e)
			}
			// duplicate client-chosen id is refused with a canceled create response
			must(t, "send", w.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: b(p), WatchId: 777}}}))
			if d := w.next("duplicate id"); !d.Created || !d.Canceled || d.WatchId != -1 || d.CancelReason != "mvcc: duplicate watch ID provided on the WatchStream" {
				t.Errorf("duplicate watch id: %v", d)
			}
		})

		t.Run("catch-up and filters", func(t *testing.T) {
			r1 := put("c/a", "1")
			put("c/b", "1")
			del("c/a")
			put("c/a", "2")
			w := openRawWatch(t, tg)
			all := w.create(&pb.WatchCreateRequest{Key: b(p + "c/"), RangeEnd: prefixEnd(p + "c/"), StartRevision: r1, PrevKv: true})
			noput := w.create(&pb.WatchCreateRequest{Key: b(p + "c/"), RangeEnd: prefixEnd(p + "c/"), StartRevision: r1, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}})
			nodel := w.create(&pb.WatchCreateRequest{Key: b(p + "c/a"), RangeEnd: b(p + "c/b"), StartRevision: r1 + 1, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}})
			got := w.events(4 + 1 + 1)
			if s := evStr(got[all.WatchId]); s != fmt.Sprintf("PUT %sc/a=1@%d; PUT %sc/b=1@%d; DELETE %sc/a=@%d(prev 1@%d); PUT %sc/a=2@%d", p, r1, p, r1+1, p, r1+2, r1, p, r1+3) {
				t.Errorf("catch-up events: %s", s)
			}
			if s := evStr(got[noput.WatchId]); s != fmt.Sprintf("DELETE %sc/a=@%d", p, r1+2) {
				t.Errorf("NOPUT events: %s", s)
			}
			if s := evStr(got[nodel.WatchId]); s != fmt.Sprintf("PUT %sc/a=2@%d", p, r1+3) {
				t.Errorf("NODELETE events (range [c/a, c/b) from %d): %s", r1+1, s)
			}
			// then live
			r5 := put("c/b", "live")
			e := w.events(1)
			if len(e[all.WatchId]) != 1 || e[all.WatchId][0].Kv.ModRevision != r5 || len(e[noput.WatchId]) != 0 {
				t.Errorf("live after catch-up: %v", e)
			}
			// RequestProgress: a notification with the current revision, watch id -1, after the events
			must(t, "progress", w.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}))
			pr := w.next("progress response")
			if len(pr.Events) != 0 || pr.Header.Revision != r5 || pr.WatchId != -1 || pr.Created || pr.Canceled {
				t.Errorf("progress response: %v (want no events, revision %d, watch_id -1)", pr, r5)
			}
			w.quiet(200 * time.Millisecond)
		})

		t.Run("transaction events share a revision", func(t *testing.T) {
			w := openRawWatch(t, tg)
			c := w.create(&pb.WatchCreateRequest{Key: b(p + "t/"), RangeEnd: prefixEnd(p + "t/")})
			tr, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"t/2", "b"), putOp(p+"t/1", "a"), delOp(p+"t/9", "")}})
			must(t, "txn", err)
			r := w.next("txn events")
			if r.WatchId != c.WatchId || len(r.Events) != 2 || r.Events[0].Kv.ModRevision != tr.Header.Revision || r.Events[1].Kv.ModRevision != tr.Header.Revision {
				t.Errorf("txn events in one response at revision %d: %v", tr.Header.Revision, r)
			}
		})

		t.Run("compacted start revision", func(t *testing.T) {
			r1 := put("k/a", "1")
			put("k/a", "2")
			r3 := put("k/a", "3")
			_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: r3})
			must(t, "compact", err)
			w := openRawWatch(t, tg)
			must(t, "send", w.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: b(p + "k/a"), StartRevision: r1}}}))
			var canceled *pb.WatchResponse
			for i := 0; i < 2 && canceled == nil; i++ {
				r := w.next("compacted watch")
				if r.Canceled {
					canceled = r
				}
			}
			if canceled == nil || canceled.CompactRevision != r3 || canceled.CancelReason != "" {
				t.Errorf("compacted watch: %v (want canceled, compact_revision %d, no cancel reason)", canceled, r3)
			}
			// the same through the official client: ErrCompacted
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			resp, ok := <-tg.Cli.Watch(wctx, p+"k/a", clientv3.WithRev(r1))
			if !ok || resp.CompactRevision != r3 || resp.Err() != rpctypes.ErrCompacted {
				t.Errorf("clientv3 watch on compacted revision: ok=%v compact=%d err=%v", ok, resp.CompactRevision, resp.Err())
			}
			// at the compaction revision itself it works
			resp, ok = <-tg.Cli.Watch(wctx, p+"k/a", clientv3.WithRev(r3))
			if !ok || len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "3" {
				t.Errorf("watch at compaction revision: %v", resp)
			}
		})

		t.Run("fragment", func(t *testing.T) {
			big := strings.Repeat("x", 150*1024)
			r1 := put("f/00", big)
			for i := 1; i < 16; i++ {
				put(fmt.Sprintf("f/%02d", i), big)
			}
			for _, frag := range []bool{true, false} {
				w := openRawWatch(t, tg)
				c := w.create(&pb.WatchCreateRequest{Key: b(p + "f/"), RangeEnd: prefixEnd(p + "f/"), StartRevision: r1, Fragment: frag})
				n, fragments := 0, 0
				for n < 16 {
					r := w.next("fragmented events")
					if r.WatchId != c.WatchId {
						t.Fatalf("response for watch %d", r.WatchId)
					}
					if r.Fragment {
						fragments++
					}
					n += len(r.Events)
				}
				if n != 16 {
					t.Errorf("fragment=%v: %d events, want 16", frag, n)
				}
				if frag && fragments == 0 {
					t.Errorf("fragment=true: 16×150 KiB of catch-up events (> max request bytes + 512 KiB) came without a fragmented response")
				}
				if !frag && fragments > 0 {
					t.Errorf("fragment=false: got fragmented responses")
				}
			}
			// the official client reassembles fragments
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			wc := tg.Cli.Watch(wctx, p+"f/", clientv3.WithPrefix(), clientv3.WithRev(r1), clientv3.WithFragment())
			n := 0
			for n < 16 {
				resp, ok := <-wc
				if !ok || resp.Err() != nil {
					t.Fatalf("clientv3 fragmented watch: %v", resp.Err())
				}
				n += len(resp.Events)
			}
		})

		t.Run("clientv3", func(t *testing.T) {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			wc := tg.Cli.Watch(wctx, p+"cv/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
			if r := <-wc; !r.Created {
				t.Fatalf("want created notification, got %v", r)
			}
			r1 := put("cv/a", "1")
			r2 := put("cv/a", "2")
			var evs []*clientv3.Event
			for len(evs) < 2 {
				r := <-wc
				must(t, "watch", r.Err())
				evs = append(evs, r.Events...)
			}
			if evs[0].Kv.ModRevision != r1 || evs[1].PrevKv == nil || evs[1].Kv.ModRevision != r2 || !evs[1].IsModify() || !evs[0].IsCreate() {
				t.Errorf("clientv3 events: %v", evs)
			}
			must(t, "RequestProgress", tg.Cli.RequestProgress(wctx))
			r := <-wc
			if !r.IsProgressNotify() || r.Header.Revision != r2 {
				t.Errorf("clientv3 RequestProgress: progress=%v revision=%d, want %d", r.IsProgressNotify(), r.Header.Revision, r2)
			}
		})
	})
}

func TestWatchProgressNotifyInterval(t *testing.T) {
	forEachDedicated(t, serverOpts{ProgressNotify: time.Second}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		pr, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/registry/pods/a"), Value: b("1")})
		must(t, "put", err)
		w := openRawWatch(t, tg)
		c := w.create(&pb.WatchCreateRequest{Key: b("/registry/pods/"), RangeEnd: prefixEnd("/registry/pods/"), ProgressNotify: true})
		plain := w.create(&pb.WatchCreateRequest{Key: b("/registry/nodes/"), RangeEnd: prefixEnd("/registry/nodes/")})
		start := time.Now()
		r := w.next("periodic progress notification")
		if len(r.Events) != 0 || r.WatchId != c.WatchId || r.Header.Revision != pr.Header.Revision {
			t.Errorf("progress notification: %v (want watch %d, revision %d, no events)", r, c.WatchId, pr.Header.Revision)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("first progress notification after %v with a 1s interval", d)
		}
		_ = plain
	})
}

// TestWatchCatchUpBatches: a watcher created 2,500 revisions in the past gets
// every missed event once, in revision order, in responses of at most 1,000
// revisions each (etcd's watchBatchMaxRevs; the store reads its catch-up from
// history one such batch at a time), then live events.
func TestWatchCatchUpBatches(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		const n = 2500
		revs := make([]int64, n)
		for i := 0; i < n; i++ {
			r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(fmt.Sprintf("%sbig/k%04d", p, i%300)), Value: b(fmt.Sprint(i))})
			must(t, "put", err)
			revs[i] = r.Header.Revision
		}
		first := revs[0]
		w := openRawWatch(t, tg)
		c := w.create(&pb.WatchCreateRequest{Key: b(p + "big/"), RangeEnd: prefixEnd(p + "big/"), StartRevision: first})
		var got []*mvccpb.Event
		responses := 0
		for len(got) < n {
			r := w.next(fmt.Sprintf("catch-up after %d events", len(got)))
			if r.WatchId != c.WatchId || r.Canceled || len(r.Events) == 0 {
				t.Fatalf("unexpected response: %v", r)
			}
			inResp := map[int64]bool{}
			for _, ev := range r.Events {
				inResp[ev.Kv.ModRevision] = true
				if ev.Kv.ModRevision > r.Header.Revision {
					t.Errorf("event at %d in a response with header revision %d", ev.Kv.ModRevision, r.Header.Revision)
				}
			}
			if len(inResp) > 1000 {
				t.Errorf("response %d holds %d revisions (etcd sends at most 1000)", responses, len(inResp))
			}
			got = append(got, r.Events...)
			responses++
		}
		for i, ev := range got {
			if want := fmt.Sprintf("%sbig/k%04d=%d@%d", p, i%300, i, revs[i]); fmt.Sprintf("%s=%s@%d", ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision) != want {
				t.Fatalf("event %d: %s=%s@%d, want %s", i, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, want)
			}
		}
		if responses < 3 {
			t.Errorf("%d events of %d revisions came in %d responses (want at least 3 of at most 1000 revisions)", n, n, responses)
		}
		r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "big/live"), Value: b("x")})
		must(t, "put", err)
		if e := w.events(1)[c.WatchId]; len(e) != 1 || e[0].Kv.ModRevision != r.Header.Revision {
			t.Errorf("live event after the catch-up: %v", e)
		}
		w.quiet(200 * time.Millisecond)
	})
}
