package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

func TestCollectorPicksCheapestPreemption(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	cand := func(node string, prio int32, n int) *wire.PreemptionCandidate {
		return &wire.PreemptionCandidate{Node: node, Cost: wire.PreemptionCost{HighestPriority: prio, SumPriorities: int64(prio) * int64(n), Victims: n}}
	}
	// A feasible node anywhere wins over any preemption.
	c, recs, _ := newTestCollector(3, 1, time.Second)
	k := wire.AttemptKey{UID: "f"}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Preemption: cand("n0", 1, 1)})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "n1", Score: 1, Feasible: true})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 2, Preemption: cand("n2", 1, 1)})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	if w := allowed(recs, k); w[0] != 1 || recs[1].Decisions()[0].Preempt {
		t.Fatalf("winner %v (%v), want shard 1 binding", w, recs[1].Decisions())
	}
	schedtest.Eventually(t, func() bool { return len(recs[0].Decisions()) == 1 && len(recs[2].Decisions()) == 1 }) // candidates denied

	// No feasible node: the globally cheapest candidate (shard 2) is told to preempt.
	k2 := wire.AttemptKey{UID: "p"}
	c.Expect(k2, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k2, Shard: 0, Preemption: cand("n0", 100, 1)})
	_ = c.Propose(ctx, wire.Proposal{Key: k2, Shard: 1, Preemption: cand("n1", 50, 3)})
	_ = c.Propose(ctx, wire.Proposal{Key: k2, Shard: 2, Preemption: cand("n2", 50, 2)})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k2)) == 1 })
	if w := allowed(recs, k2); w[0] != 2 {
		t.Fatalf("preemption went to shard %v, want 2 (lowest priority, then fewest victims)", w)
	}
	for _, d := range recs[2].Decisions() {
		if d.Key == k2 && !d.Preempt {
			t.Fatal("the chosen shard was not told to preempt")
		}
	}
	schedtest.Eventually(t, func() bool { return metrics.Counter("collector/0", "preemptions") == 1 })
	_ = c.Result(ctx, wire.CommitResult{Key: k2, Shard: 2, Node: "n2", Preempted: true})
	if metrics.Counter("collector/0", "preempted") != 1 {
		t.Fatal("preempted result not counted")
	}

	// A shard saying the pod still waits for earlier victims vetoes any new preemption.
	c3, recs3, q3 := newTestCollector(2, 1, time.Second)
	k3 := wire.AttemptKey{UID: "w"}
	c3.Expect(k3, 0)
	_ = c3.Propose(ctx, wire.Proposal{Key: k3, Shard: 0, PreemptWait: true, Reason: "waiting"})
	_ = c3.Propose(ctx, wire.Proposal{Key: k3, Shard: 1, Preemption: cand("n1", 1, 1)})
	schedtest.Eventually(t, func() bool { return q3.n() == 1 })
	if len(allowed(recs3, k3)) != 0 {
		t.Fatal("preempted although a shard is waiting for the pod's earlier victims")
	}
}

// Ties between equally cheap candidates on different shards are broken at random.
func TestCollectorPreemptionTiesAtRandom(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, _ := newTestCollector(2, 1, time.Second)
	wins := map[int]int{}
	for i := range 200 {
		k := wire.AttemptKey{UID: "t", Attempt: i}
		c.Expect(k, 0)
		for s := range 2 {
			_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: s, Preemption: &wire.PreemptionCandidate{Node: fmt.Sprint(s), Cost: wire.PreemptionCost{Victims: 1}}})
		}
		schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
		wins[allowed(recs, k)[0]]++
	}
	if wins[0] < 60 || wins[1] < 60 {
		t.Fatalf("preemption ties not broken at random: %v", wins)
	}
}

// A live shard that did not answer may have a free node or a cheaper candidate: no preemption
// on partial answers (the hard deadline requeues the pod instead).
func TestCollectorNoPreemptionOnPartialAnswers(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, q := newTestCollector(3, 1, 30*time.Millisecond)
	k := wire.AttemptKey{UID: "partial"}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Preemption: &wire.PreemptionCandidate{Node: "n0", Cost: wire.PreemptionCost{Victims: 1}}})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Reason: "Insufficient cpu"})
	schedtest.Eventually(t, func() bool { return q.n() == 1 }) // shard 2 silent: hard deadline
	if len(allowed(recs, k)) != 0 {
		t.Fatal("preempted without shard 2's answer")
	}
}
