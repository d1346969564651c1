package wire_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

func TestFrameRoundTrip(t *testing.T) {
	p := fakeapi.Pod("ns", "p1", podspec.DefaultSchedulerName, 100, 10)
	f, err := wire.EncodeFrame(wire.Header{UID: "u", Namespace: "ns", Name: "p1", Attempt: 2, Collector: 1}, p)
	if err != nil {
		t.Fatal(err)
	}
	h, pb, err := wire.SplitFrame(f)
	if err != nil || h.Attempt != 2 || h.Collector != 1 {
		t.Fatalf("%+v %v", h, err)
	}
	got, err := wire.DecodePod(pb)
	if err != nil || got.Name != "p1" || got.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() != 100 {
		t.Fatalf("%v %v", got, err)
	}
}

type recCollector struct {
	mu sync.Mutex
	p  []wire.Proposal
}

func (r *recCollector) Propose(_ context.Context, p wire.Proposal) error {
	r.mu.Lock()
	r.p = append(r.p, p)
	r.mu.Unlock()
	return nil
}
func (r *recCollector) Result(context.Context, wire.CommitResult) error { return nil }

func TestGRPCRelayAndControlMessages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaf := &schedtest.CountSink{}
	col := &recCollector{}
	dec := &schedtest.RecShard{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = wire.Serve(ctx, lis, wire.Node{Frames: leaf, Proposals: col, Decisions: dec}) }()
	c, err := wire.Dial(ctx, lis.Addr().String(), 16)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame, _ := wire.EncodeFrame(wire.Header{UID: "u", Name: "p"}, fakeapi.Pod("ns", "p", podspec.DefaultSchedulerName, 1, 1))
	for range 20 {
		if err := c.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
	}
	schedtest.Eventually(t, func() bool { return leaf.N.Load() == 20 })
	same := string(leaf.Last()) == string(frame)
	if !same {
		t.Fatal("frame bytes changed on the wire")
	}
	if err := c.Propose(ctx, wire.Proposal{Key: wire.AttemptKey{UID: "u"}, Shard: 2, Node: "n", Score: 9, Feasible: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Decide(ctx, wire.Decision{Key: wire.AttemptKey{UID: "u"}, Allow: true}); err != nil {
		t.Fatal(err)
	}
	schedtest.Eventually(t, func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		return len(col.p) == 1 && len(dec.Decisions()) == 1
	})
	if col.p[0].Score != 9 || !dec.Decisions()[0].Allow {
		t.Fatalf("control messages: %+v %+v", col.p, dec.Decisions())
	}
	if err := c.ProposeSync(ctx, wire.Proposal{Key: wire.AttemptKey{UID: "v"}, Shard: 1}); err != nil {
		t.Fatal(err)
	}
}
