package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

func TestRelayTreeDeliversEveryFrameToEveryShard(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leaves []wire.FrameSink
	var sinks []*schedtest.CountSink
	for range 23 {
		s := &schedtest.CountSink{}
		sinks = append(sinks, s)
		leaves = append(leaves, s)
	}
	root, relays := BuildTree(ctx, leaves, 4, 8)
	if r, _ := TreeShape(23, 4); r != relays {
		t.Fatalf("TreeShape %d relays, BuildTree %d", r, relays)
	}
	for i := range 100 {
		if err := root.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	schedtest.Eventually(t, func() bool {
		for _, s := range sinks {
			if s.N.Load() != 100 {
				return false
			}
		}
		return true
	})
}

func TestRelayBackPressure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := &schedtest.CountSink{Block: make(chan struct{})}
	r := New(ctx, "bp", []wire.FrameSink{slow}, 4)
	sent := atomic.Int64{}
	go func() {
		for range 50 {
			_ = r.Send(ctx, []byte("x"))
			sent.Add(1)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	// 4 queued + 1 held by the blocked child: the sender must be blocked, not buffering all 50.
	if n := sent.Load(); n > 6 {
		t.Fatalf("relay accepted %d frames with a stuck child and a queue of 4", n)
	}
	close(slow.Block)
	schedtest.Eventually(t, func() bool { return slow.N.Load() == 50 })
}
