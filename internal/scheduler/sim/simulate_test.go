package sim

import (
	"context"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/shard"
)

// A small simulated run with counted binds places every pod exactly once, within capacity
// (Simulate fails when the collectors' and the ledger's counts differ), singly and in batches.
func TestSimulateCountedBinds(t *testing.T) {
	for _, batch := range []int{-1, 8} {
		r, err := Simulate(context.Background(), Config{Nodes: 40, Pods: 200, Shards: 4, Fanout: 2, Parallelism: 1,
			EquivalenceTTL: time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: 2, Batch: batch, ParallelPods: 2,
			Precreate: true, GlobalView: "off", CountedBinds: true, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		// 40 nodes of 110 pods, 200 pods of 100m on 8 CPUs: capacity is not the limit, so
		// every pod is bound; the ledger check inside Simulate caught double binds.
		if r.Bound != 200 || r.MaxPerNode > 80 {
			t.Fatalf("batch %d: bound %d, max per node %d", batch, r.Bound, r.MaxPerNode)
		}
	}
}
