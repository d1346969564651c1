package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/metrics"
)

// The per-shard cost measurements run end to end (decode, cycle, reserve, commit; a batch's
// plan and decision) and report positive costs.
func TestMeasureShardCosts(t *testing.T) {
	ctx := context.Background()
	c, err := Measure(ctx, 50, 20, time.Second, 0, MeasureOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if c.EvalCPUUs <= 0 || c.CommitCPUUs <= 0 {
		t.Fatalf("single: %+v", c)
	}
	b, err := MeasureBatch(ctx, 50, 4, 8, time.Second, 0, MeasureOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if b.FirstCPUUs <= 0 || b.CommitCPUUs <= 0 {
		t.Fatalf("batch: %+v", b)
	}
}

// Interleaved measurement (the conditions of a run of S shards on C cores): every shard gets its
// share of the pods and of the batches, and each one is bound on the shard that planned it.
func TestMeasureShardsInterleaved(t *testing.T) {
	ctx := context.Background()
	o := MeasureOpts{Shards: 4, Workers: 2}
	c, err := Measure(ctx, 25, 40, time.Second, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if c.EvalCPUUs <= 0 || c.Opts != o {
		t.Fatalf("single: %+v", c)
	}
	for i := range o.Shards {
		if n := metrics.Counter(fmt.Sprintf("shard/%d", i), "bound"); n != 10 {
			t.Fatalf("shard %d bound %d pods, want 10", i, n)
		}
	}
	b, err := MeasureBatch(ctx, 25, 8, 4, time.Second, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if b.FirstCPUUs <= 0 || b.CommitCPUUs <= 0 || b.ReleaseCPUUs <= 0 {
		t.Fatalf("batch: %+v", b)
	}
	// Warm-up (8 batches of 1), timed singles (32 of 1), then 8 batches of 4 won: 72 pods; the
	// last 8 batches of 4 are released, not bound.
	var bound int64
	for i := range o.Shards {
		n := metrics.Counter(fmt.Sprintf("shard/%d", i), "bound")
		if n == 0 {
			t.Fatalf("shard %d bound nothing", i)
		}
		bound += n
	}
	if bound != 72 {
		t.Fatalf("bound %d pods in all, want 72", bound)
	}
}
