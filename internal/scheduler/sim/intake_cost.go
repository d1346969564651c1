package sim

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// IntakeCost is the collector's own CPU per pod before any shard sees it: the watch delivering
// the pod, the intake's bookkeeping and queue, the batcher, the pod's protobuf and its frame,
// the power-of-d pick and the collector's registration of the attempt, the frame handed to each
// target. The model's EncodeUs is this (a batch costs B·EncodeUs). Measuring the frame encoding
// alone (HopCosts.EncodeUs) left ≈20 µs per pod out of the model: a third of a batch run's
// collector work.
type IntakeCost struct {
	Pods, Shards, Scatter, Batch int
	CPUUsPerPod                  float64 `json:"cpu_us_per_pod"`
	Frames                       int64   `json:"frames"` // frames sent (a batch is one; counted once per frame, not per target)
}

// discardSink takes frames and decisions and drops them, counting frames.
type discardSink struct{ n atomic.Int64 }

func (d *discardSink) Send(context.Context, []byte) error          { d.n.Add(1); return nil }
func (d *discardSink) Decide(context.Context, wire.Decision) error { return nil }

// MeasureIntake runs one collector's intake over pods pre-created pods (the runs' pods) with
// shards discarding shard sinks, --scatter d and --batch batch (≤ 1: off), and an in-flight
// window larger than the pods so nothing waits for a decision: the CPU from the first frame
// sent to the last, over the pods sent in that time. Nothing answers, so the collector's
// per-proposal and per-decision work is not in it (HopCosts.CollectorUs is).
func MeasureIntake(ctx context.Context, pods, shards, d, batch int) (*IntakeCost, error) {
	metrics.Reset()
	objs := make([]k8sruntime.Object, 0, pods)
	for i := range pods {
		objs = append(objs, runPod(i))
	}
	cs := fakeapi.NewClient(objs...)
	objs = nil
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	decisions := map[int]wire.DecisionSink{}
	frames := map[int]wire.FrameSink{}
	sinks := make([]*discardSink, shards)
	for i := range shards {
		sinks[i] = &discardSink{}
		decisions[i], frames[i] = sinks[i], sinks[i]
	}
	root := &discardSink{}
	live := wire.AllShards(shards)
	col := collector.New(collector.Config{Index: 0, Shards: decisions, Live: func() []int { return live }, Deadline: time.Hour,
		HardDeadline: time.Hour, NoAnswerTimeout: time.Hour, CommitTimeout: time.Hour,
		Requeue: func(wire.AttemptKey, time.Duration, string) {}, Finished: func(wire.AttemptKey, string, bool) {}, Decided: func(wire.AttemptKey) {}})
	scatter := d
	if d >= shards {
		scatter = collector.ScatterAll
	}
	in := intake.New(intake.Config{Client: cs, Collector: 0, Collectors: 1, Root: root, InFlight: pods + 1,
		Scatter: scatter, ShardSinks: frames, Batch: batch}, col)
	go func() { _ = in.Run(ctx) }()
	sent := func() int64 { return metrics.Counter("intake/0", "sent") }
	giveUp := time.Now().Add(10 * time.Minute)
	for sent() == 0 { // spin: the first sends follow the sync within microseconds (this CPU is before cpu0)
		if time.Now().After(giveUp) || ctx.Err() != nil {
			return nil, fmt.Errorf("intake: no pod sent")
		}
		runtime.Gosched()
	}
	s0, cpu0 := sent(), metrics.CPUSeconds()
	for sent() < int64(pods) {
		if time.Now().After(giveUp) || ctx.Err() != nil {
			return nil, fmt.Errorf("intake: %d of %d pods sent", sent(), pods)
		}
		time.Sleep(time.Millisecond) // the poll is CPU of this process too: keep it rare
	}
	cpu := metrics.CPUSeconds() - cpu0
	c := &IntakeCost{Pods: pods, Shards: shards, Scatter: d, Batch: batch, CPUUsPerPod: cpu * 1e6 / float64(int64(pods)-s0),
		Frames: framesSent(0)}
	return c, nil
}
