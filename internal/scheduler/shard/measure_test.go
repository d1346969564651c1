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
	o := MeasureOpts{Shards: 4, Workers: 2, Rounds: 1}
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

// With rounds, every round measures new pods on the same shards and the median round is the
// one reported.
func TestMeasureRoundsReportTheMedian(t *testing.T) {
	ctx := context.Background()
	o := MeasureOpts{Shards: 2, Workers: 2, Rounds: 3}
	c, err := Measure(ctx, 25, 10, time.Second, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RoundsCPUUs) != 3 || c.RoundsCPUUs[1] != c.CPUUsPerPod {
		t.Fatalf("rounds %v, reported %.1f", c.RoundsCPUUs, c.CPUUsPerPod)
	}
	var bound int64
	for i := range o.Shards {
		bound += metrics.Counter(fmt.Sprintf("shard/%d", i), "bound")
	}
	if bound != 30 {
		t.Fatalf("%d pods bound over 3 rounds of 10, want 30", bound)
	}
	b, err := MeasureBatch(ctx, 25, 4, 4, time.Second, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.RoundsCPUUs) != 3 || b.RoundsCPUUs[1] != b.CPUUsPerPod {
		t.Fatalf("batch rounds %v, reported %.1f", b.RoundsCPUUs, b.CPUUsPerPod)
	}
}
