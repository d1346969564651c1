package intake

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The intake keeps at most InFlight attempts between scatter and decision; a decision frees a
// slot; a requeued attempt comes back with Attempt+1.
func TestIntakeInFlightWindowAndRequeue(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &schedtest.CountSink{}
	col := handDecidedCollector()
	in := New(Config{Client: cs, Collectors: 1, Root: root, InFlight: 2}, col)
	go func() { _ = in.Run(ctx) }()
	for i := range 5 {
		schedtest.CreatePods(t, cs, fakeapi.Pod("default", fmt.Sprintf("w-%d", i), podspec.DefaultSchedulerName, 10, 1))
	}
	schedtest.CreatePods(t, cs, fakeapi.Pod("default", "other", "default-scheduler", 10, 1)) // not ours
	schedtest.Eventually(t, func() bool { return root.N.Load() == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := root.N.Load(); n != 2 {
		t.Fatalf("%d frames sent with an in-flight window of 2", n)
	}
	// Decide the first one (unschedulable → requeue): a slot frees, the next pod goes out, and
	// the requeued attempt comes back later as attempt 1.
	h, _, _ := wire.SplitFrame(root.Last())
	in.Decided(h.Key())
	in.Requeue(h.Key(), 0, "unschedulable: test")
	schedtest.Eventually(t, func() bool { return root.N.Load() == 3 })
	for range 4 {
		// Decide every attempt that holds a slot (no shard answers in this test).
		in.mu.Lock()
		var keys []wire.AttemptKey
		for k := range in.holding {
			keys = append(keys, k)
		}
		in.mu.Unlock()
		for _, k := range keys {
			in.Decided(k)
		}
		time.Sleep(50 * time.Millisecond)
	}
	schedtest.Eventually(t, func() bool { return root.N.Load() == 6 }) // 5 pods + 1 retry, never "other"
	if in.Pending() != 5 {
		t.Fatalf("intake tracks %d pods, want 5", in.Pending())
	}
	if metrics.Counter("intake/0", "resent") != 1 {
		t.Fatalf("resent %d, want 1", metrics.Counter("intake/0", "resent"))
	}
}

// handDecidedCollector is the intake's collector in tests that decide attempts by hand: one
// live shard, no decision sinks, no attempt timing out on its own.
func handDecidedCollector() *collector.Collector {
	return collector.New(collector.Config{Shards: map[int]wire.DecisionSink{}, Live: func() []int { return []int{0} }, NoAnswerTimeout: time.Hour})
}

// With Config.Pods (the in-process system's informer of every pod) the intake opens no watch
// of its own and takes from that informer exactly what the field-selected watch gives it: our
// unscheduled pods. A pod bound meanwhile is forgotten, as the watch's Deleted makes it.
func TestIntakeFiltersSharedPodInformer(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(cs, 0)
	pods := factory.Core().V1().Pods().Informer()
	root := &schedtest.CountSink{}
	in := New(Config{Client: cs, Collectors: 1, Root: root, InFlight: 100, Pods: pods}, handDecidedCollector())
	if len(in.factories) != 0 {
		t.Fatalf("the intake opened %d watches of its own beside the shared informer", len(in.factories))
	}
	factory.Start(ctx.Done())
	go func() { _ = in.Run(ctx) }()
	bound := fakeapi.Pod("default", "bound", podspec.DefaultSchedulerName, 10, 1)
	bound.Spec.NodeName = "n1"
	schedtest.CreatePods(t, cs, bound, fakeapi.Pod("default", "other", "someone-else", 10, 1),
		fakeapi.Pod("default", "a", podspec.DefaultSchedulerName, 10, 1), fakeapi.Pod("default", "b", podspec.DefaultSchedulerName, 10, 1))
	schedtest.Eventually(t, func() bool { return root.N.Load() == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := root.N.Load(); n != 2 || in.Pending() != 2 {
		t.Fatalf("%d frames sent, %d pods tracked; want 2 and 2 (a bound pod and another scheduler's are not ours)", n, in.Pending())
	}
	if _, ok := in.get("default/bound"); ok {
		t.Fatal("get returned a bound pod from the shared informer")
	}
	a, err := cs.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Spec.NodeName = "n1"
	if _, err := cs.CoreV1().Pods("default").Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	schedtest.Eventually(t, func() bool { return in.Pending() == 1 })
}
