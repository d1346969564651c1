package e2e

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A client that half-closes its watch stream (CloseSend: it has nothing more to ask) keeps
// receiving its watchers' events: etcd's recvLoop ends on io.EOF without ending the stream.
// The stream ends when the client goes away, and the server's open-stream count falls.
func TestWatchAfterCloseSend(t *testing.T) {
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		const pfx = "/e2e/halfclose/"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := openRawWatchCtx(t, tg, ctx)
		w.create(&pb.WatchCreateRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx)})
		must(t, "close send", w.ws.CloseSend())
		// Give the server time to read the half-close before the writes.
		time.Sleep(100 * time.Millisecond)
		for _, k := range []string{"a", "b", "c"} {
			_, err := tg.KV.Put(ctxT(t), &pb.PutRequest{Key: b(pfx + k), Value: b("v")})
			must(t, "put", err)
		}
		evs := w.events(3)
		var got []string
		for _, es := range evs {
			for _, ev := range es {
				got = append(got, string(ev.Kv.Key[len(pfx):]))
			}
		}
		if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
			t.Fatalf("events after CloseSend: %v, want a b c", got)
		}
		if tg.Proc == nil {
			return
		}
		streams := func() string { return scrape(t, tg.Proc.MetricsURL)["etcd_debugging_mvcc_watch_stream_total"] }
		if s := streams(); s != "1" {
			t.Fatalf("watch streams %s with the half-closed stream open, want 1", s)
		}
		cancel()
		for deadline := time.Now().Add(10 * time.Second); streams() != "0" && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if s := streams(); s != "0" {
			t.Fatalf("watch streams %s after the half-closed client went away, want 0", s)
		}
	})
}
