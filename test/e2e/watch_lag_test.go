package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A watcher whose client stops reading (its gRPC stream, not only its Go channel): the server
// holds a bounded amount for it — the store's RSS is measured while ~195 MiB of events go by —
// and a compaction that passes its revision meanwhile gets it cancelled with compact_revision
// once it reads again, as etcd cancels a lagging watcher (a victim that falls behind the
// compaction is synced as unsynced and cancelled). A watcher of the same keys on another stream
// that keeps reading gets every event and is not cancelled.
func TestWatchLaggingWatcherIsCut(t *testing.T) {
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		// 400 writes (39 MiB) fill etcd's send buffers and make the watcher a victim; the store's
		// memory is measured over 2000 (195 MiB).
		lagging(t, tg, "/registry/configmaps/lag/", 400, false)
		if tg.Proc != nil {
			lagging(t, tg, "/registry/configmaps/lag2/", 2000, true)
			stalledThenGone(t, tg)
		}
	})
}

// A client that stops reading and then goes away while its stream waits for it: the stream
// ends (its task, watchers and accounting with it).
func stalledThenGone(t *testing.T, tg *target) {
	t.Helper()
	streams := func() string { return scrape(t, tg.Proc.MetricsURL)["etcd_debugging_mvcc_watch_stream_total"] }
	// The streams of the scenarios before this one end asynchronously once their clients go
	// away; counted while one still ends, "before" would include it and the new stream could
	// replace it in the count unnoticed. This dedicated server has no other watch streams.
	before := "0"
	for deadline := time.Now().Add(10 * time.Second); streams() != before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if s := streams(); s != before {
		t.Fatalf("watch streams %s after the earlier scenarios' clients went away, want %s", s, before)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, err := pb.NewWatchClient(smallWindowConn(t, tg.Endpoint)).Watch(ctx)
	must(t, "open", err)
	p := "/registry/configmaps/gone/"
	req := &pb.WatchCreateRequest{Key: b(p), RangeEnd: prefixEnd(p)}
	must(t, "create", ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}))
	_, err = ws.Recv()
	must(t, "created", err)
	value := b(strings.Repeat("x", 100<<10))
	for i := range 200 { // 20 MiB: past the stream's queue and windows
		_, err := tg.KV.Put(ctxT(t), &pb.PutRequest{Key: b(p + string(rune('a'+i%20))), Value: value})
		must(t, "put", err)
	}
	if s := streams(); s == before {
		t.Fatalf("watch streams %s with the stalled stream open, as before it", s)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for streams() != before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s := streams(); s != before {
		t.Fatalf("watch streams %s after the stalled client went away, want %s", s, before)
	}
}

// lagging runs the scenario on prefix p with the given number of 100 KiB writes; with measure,
// the store's RSS growth meanwhile is bounded.
func lagging(t *testing.T, tg *target, p string, writes int, measure bool) {
	t.Helper()
	const keys, size = 20, 100 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	create := func(ws pb.Watch_WatchClient) int64 {
		t.Helper()
		req := &pb.WatchCreateRequest{Key: b(p), RangeEnd: prefixEnd(p)}
		must(t, "create", ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}))
		r, err := ws.Recv()
		must(t, "created", err)
		if !r.Created {
			t.Fatalf("want a created response, got %v", r)
		}
		return r.WatchId
	}
	stalledCtx, stopStalled := context.WithCancel(ctx)
	defer stopStalled()
	stalled, err := pb.NewWatchClient(smallWindowConn(t, tg.Endpoint)).Watch(stalledCtx)
	must(t, "open the stalled stream", err)
	id := create(stalled)

	reader, err := tg.Watch.Watch(ctx)
	must(t, "open the reading stream", err)
	create(reader)
	var seen atomic.Int64
	var readerCanceled atomic.Bool
	go func() {
		for {
			r, err := reader.Recv()
			if err != nil {
				return
			}
			if r.Canceled {
				readerCanceled.Store(true)
			}
			seen.Add(int64(len(r.Events)))
		}
	}()

	rss := func() int64 {
		if !measure {
			return 0
		}
		return vmRSS(t, tg.Proc.Pid())
	}
	before := rss()
	peak := before
	value := strings.Repeat("x", size)
	var last int64
	for i := range writes {
		r, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + string(rune('a'+i%keys))), Value: b(value)})
		must(t, "put", err)
		last = r.Header.Revision
		if i%100 == 99 {
			_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: last})
			must(t, "compact", err)
			peak = max(peak, rss())
		}
	}
	if measure {
		const bound = 40 << 20
		growth := peak - before
		t.Logf("store RSS %d MiB before, peak %d MiB with a stalled watcher while %d MiB of events went by (+%d MiB)",
			before>>20, peak>>20, writes*size>>20, growth>>20)
		if growth > bound {
			t.Fatalf("store RSS grew %d MiB with a stalled watcher; want <= %d MiB", growth>>20, bound>>20)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for seen.Load() < int64(writes) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if seen.Load() != int64(writes) || readerCanceled.Load() {
		t.Fatalf("the reading watcher got %d of %d events (canceled: %v)", seen.Load(), writes, readerCanceled.Load())
	}

	// The stalled client reads again: events it was owed, in order, then the cancel.
	time.AfterFunc(15*time.Second, stopStalled)
	var events int
	var rev int64
	for {
		r, err := stalled.Recv()
		must(t, "stalled stream (no cancel within 15 s)", err)
		if r.Canceled {
			if r.WatchId != id || r.CompactRevision != last {
				t.Fatalf("cancel: watch %d compact_revision %d; want watch %d, compact_revision %d", r.WatchId, r.CompactRevision, id, last)
			}
			break
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision <= rev {
				t.Fatalf("event at revision %d after %d", ev.Kv.ModRevision, rev)
			}
			rev = ev.Kv.ModRevision
			events++
		}
	}
	if events >= writes {
		t.Fatalf("the stalled watcher got all %d events before its cancel", events)
	}
	t.Logf("stalled watcher: %d of %d events, then cancelled with compact_revision %d", events, writes, last)
}
