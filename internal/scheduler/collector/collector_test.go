package collector

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

type requeueRec struct {
	mu   sync.Mutex
	keys []wire.AttemptKey
	why  []string
}

func (q *requeueRec) requeue(k wire.AttemptKey, _ time.Duration, why string) {
	q.mu.Lock()
	q.keys = append(q.keys, k)
	q.why = append(q.why, why)
	q.mu.Unlock()
}

func (q *requeueRec) n() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys)
}

func newTestCollector(shards int, fraction float64, deadline time.Duration) (*Collector, []*schedtest.RecShard, *requeueRec) {
	sinks := map[int]wire.DecisionSink{}
	var recs []*schedtest.RecShard
	for i := range shards {
		r := &schedtest.RecShard{}
		recs = append(recs, r)
		sinks[i] = r
	}
	q := &requeueRec{}
	live := wire.AllShards(shards)
	c := New(Config{Index: 0, Shards: sinks, Live: func() []int { return live }, Fraction: fraction,
		Deadline: deadline, CommitTimeout: time.Second, NoAnswerTimeout: 300 * time.Millisecond, Requeue: q.requeue})
	return c, recs, q
}

func allowed(recs []*schedtest.RecShard, k wire.AttemptKey) []int {
	var out []int
	for i, r := range recs {
		for _, d := range r.Decisions() {
			if d.Key == k && d.Allow {
				out = append(out, i)
			}
		}
	}
	return out
}

func TestCollectorPicksBestScore(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, _ := newTestCollector(3, 1, time.Second)
	k := wire.AttemptKey{UID: "a"}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "n0", Score: 50, Feasible: true})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "n1", Score: 90, Feasible: true})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 2, Feasible: false})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	if w := allowed(recs, k); w[0] != 1 {
		t.Fatalf("winner %v, want shard 1 (score 90)", w)
	}
	schedtest.Eventually(t, func() bool { return len(recs[0].Decisions()) == 1 }) // the loser hears deny
	if recs[0].Decisions()[0].Allow || len(recs[2].Decisions()) != 0 {
		t.Fatalf("loser decisions: %v / %v", recs[0].Decisions(), recs[2].Decisions())
	}
	// One proposal latency per shard's answer (Grafana's shard proposal latency panel).
	if l := metrics.For("collector/0").Hist("proposal_latency"); l.Count != 3 {
		t.Errorf("proposal latencies recorded: %d, want 3", l.Count)
	}
}

func TestCollectorTiesAtRandom(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, _ := newTestCollector(2, 1, time.Second)
	wins := map[int]int{}
	for i := range 400 {
		k := wire.AttemptKey{UID: "t", Attempt: i}
		c.Expect(k, 0)
		_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "a", Score: 7, Feasible: true})
		_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "b", Score: 7, Feasible: true})
		schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
		wins[allowed(recs, k)[0]]++
	}
	if wins[0] < 140 || wins[1] < 140 {
		t.Fatalf("ties not broken at random: %v", wins)
	}
}

func TestCollectorStragglersDeadlineAndLateCount(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	// 4 shards, decide at 50%: two answers suffice; shard 3 answers late.
	c, recs, _ := newTestCollector(4, 0.5, 80*time.Millisecond)
	k := wire.AttemptKey{UID: "s"}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "n0", Score: 10, Feasible: true})
	if len(allowed(recs, k)) != 0 {
		t.Fatal("decided with 1 of 4 answers at fraction 0.5")
	}
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "n1", Score: 20, Feasible: true})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 3, Node: "n3", Score: 99, Feasible: true}) // late
	if metrics.Counter("shard/3", "late") != 1 {
		t.Fatalf("late count for shard 3 = %d", metrics.Counter("shard/3", "late"))
	}
	schedtest.Eventually(t, func() bool { return len(recs[3].Decisions()) == 1 && !recs[3].Decisions()[0].Allow })

	// Deadline: with fraction 1 and one shard silent, decide after the deadline anyway.
	c2, recs2, _ := newTestCollector(3, 1, 60*time.Millisecond)
	k2 := wire.AttemptKey{UID: "d"}
	c2.Expect(k2, 0)
	began := time.Now()
	_ = c2.Propose(ctx, wire.Proposal{Key: k2, Shard: 0, Node: "n0", Score: 1, Feasible: true})
	_ = c2.Propose(ctx, wire.Proposal{Key: k2, Shard: 1, Feasible: false})
	schedtest.Eventually(t, func() bool { return len(allowed(recs2, k2)) == 1 })
	if el := time.Since(began); el < 50*time.Millisecond {
		t.Fatalf("decided after %s, before the deadline", el)
	}
	if metrics.Counter("shard/2", "missed_decisions") != 2 { // once above (fraction 0.5), once here
		t.Fatalf("missed_decisions for shard 2 = %d", metrics.Counter("shard/2", "missed_decisions"))
	}
}

func TestCollectorWaitsForChronicStraggler(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, _ := newTestCollector(2, 0.5, 30*time.Millisecond)
	// Shard 1 misses three decisions in a row…
	for i := range 3 {
		k := wire.AttemptKey{UID: "x", Attempt: i}
		c.Expect(k, 0)
		_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "n0", Score: 1, Feasible: true})
		schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	}
	// …so the next decision waits for it, and its better node wins: it is not starved.
	k := wire.AttemptKey{UID: "x", Attempt: 3}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "n0", Score: 1, Feasible: true})
	time.Sleep(50 * time.Millisecond) // past the ordinary deadline
	if len(allowed(recs, k)) != 0 {
		t.Fatal("did not wait for the chronic straggler")
	}
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "n1", Score: 5, Feasible: true})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	if w := allowed(recs, k)[0]; w != 1 {
		t.Fatalf("winner %d, want the straggler 1", w)
	}
}

func TestCollectorConflictRequeuesNeverDrops(t *testing.T) {
	metrics.Reset()
	ctx := context.Background()
	c, recs, q := newTestCollector(2, 1, time.Second)
	k := wire.AttemptKey{UID: "c"}
	c.Expect(k, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 0, Node: "n0", Score: 3, Feasible: true})
	_ = c.Propose(ctx, wire.Proposal{Key: k, Shard: 1, Node: "n1", Score: 1, Feasible: true})
	schedtest.Eventually(t, func() bool { return len(allowed(recs, k)) == 1 })
	_ = c.Result(ctx, wire.CommitResult{Key: k, Shard: 0, Node: "n0", Conflict: true, Error: "node no longer fits"})
	if q.n() != 1 || q.keys[0] != k {
		t.Fatalf("conflict not requeued: %v", q.keys)
	}
	// Unschedulable everywhere: requeued too (with backoff), not dropped.
	k2 := wire.AttemptKey{UID: "u"}
	c.Expect(k2, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k2, Shard: 0, Reason: "Insufficient cpu"})
	_ = c.Propose(ctx, wire.Proposal{Key: k2, Shard: 1, Reason: "Insufficient cpu"})
	schedtest.Eventually(t, func() bool { return q.n() == 2 })
	// Winner never reports: the commit timeout requeues.
	k3 := wire.AttemptKey{UID: "w"}
	c.Expect(k3, 0)
	_ = c.Propose(ctx, wire.Proposal{Key: k3, Shard: 0, Node: "n0", Score: 3, Feasible: true})
	_ = c.Propose(ctx, wire.Proposal{Key: k3, Shard: 1, Feasible: false})
	time.Sleep(1200 * time.Millisecond)
	if q.n() != 3 {
		t.Fatalf("commit timeout did not requeue: %v", q.why)
	}
	// Nobody answers at all: the hard deadline requeues.
	c4, _, q4 := newTestCollector(2, 1, 20*time.Millisecond)
	c4.Expect(wire.AttemptKey{UID: "silent"}, 0)
	schedtest.Eventually(t, func() bool { return q4.n() == 1 })
}
