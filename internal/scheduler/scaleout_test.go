package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
)

// d-sampling widens to every shard when the sampled ones have no room: a pod that fits on
// exactly one node, in one of 8 shards, is placed (through the widened or the learnt scatter).
func TestScatterWidensToTheOnlyFeasibleShard(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	var nodes []corev1.Node
	for i := range 40 {
		n := fakeapi.Node(fmt.Sprintf("small-%02d", i), 500, 4096, 110, nil)
		objs = append(objs, n)
		nodes = append(nodes, *n)
	}
	big := fakeapi.Node("big", 8000, 32768, 110, nil)
	objs = append(objs, big)
	nodes = append(nodes, *big)
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := StartAll(ctx, Config{Client: cs, Shards: 8, Scatter: 2, Batch: -1, DeadAfter: -1, Deadline: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		schedtest.CreatePods(t, cs, fakeapi.Pod("default", fmt.Sprintf("wide-%d", i), podspec.DefaultSchedulerName, 2000, 64))
		got := schedtest.WaitBound(t, cs, "default", i+1, 20*time.Second)
		for _, p := range got {
			if p.Spec.NodeName != "" && p.Spec.NodeName != "big" {
				t.Fatalf("pod %s on %s: only big fits", p.Name, p.Spec.NodeName)
			}
		}
	}
	pods := schedtest.WaitBound(t, cs, "default", 4, 0)
	checkNoOvercommit(t, nodes, pods)
	for _, p := range pods {
		if p.Spec.NodeName != "big" {
			t.Errorf("pod %s unbound (%q)", p.Name, p.Spec.NodeName)
		}
	}
	all := metrics.Counter("intake/0", "scattered_all")
	t.Logf("sampled %d, all %d, widened %d, selective %d", metrics.Counter("intake/0", "scattered_sampled"), all,
		metrics.Counter("collector/0", "widened"), metrics.Counter("collector/0", "scatter_all_selective"))
	if metrics.Counter("intake/0", "scattered_sampled") == 0 {
		t.Error("no attempt was sampled: --scatter 2 not in effect")
	}
}

// startWithPending creates the pods before the scheduler starts (they arrive in one LIST, so
// the intake batches them) and runs it.
func startWithPending(t *testing.T, cfg Config, nodeCPU int64, nodes, pods int, podCPU int64) (*fake.Clientset, []corev1.Node) {
	t.Helper()
	var objs []runtime.Object
	var nl []corev1.Node
	for i := range nodes {
		n := fakeapi.Node(fmt.Sprintf("node-%03d", i), nodeCPU, 1<<16, 110, nil)
		objs = append(objs, n)
		nl = append(nl, *n)
	}
	for i := range pods {
		objs = append(objs, fakeapi.Pod("default", fmt.Sprintf("p-%04d", i), podspec.DefaultSchedulerName, podCPU, 64))
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg.Client, cfg.DeadAfter = cs, -1
	if _, err := StartAll(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return cs, nl
}

// settledBound waits until want pods are bound, waits a little more so that a wrong extra
// Binding would land too, and checks no node is over-committed and exactly want are bound.
func settledBound(t *testing.T, cs *fake.Clientset, nodes []corev1.Node, want int, timeout time.Duration) {
	t.Helper()
	schedtest.WaitBound(t, cs, "default", want, timeout)
	time.Sleep(500 * time.Millisecond)
	pods := schedtest.WaitBound(t, cs, "default", 0, 0)
	checkNoOvercommit(t, nodes, pods)
	if n := countBoundPods(pods); n != want {
		t.Errorf("bound %d, want %d", n, want)
	}
}

func countBoundPods(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// A batch never over-commits a node: 60 identical pods of 300m on 8 nodes of 1000m (3 fit per
// node) arrive together, are placed in batches over 4 shards (d = 2), and exactly 24 bind.
func TestBatchNeverOvercommits(t *testing.T) {
	metrics.Reset()
	cs, nodes := startWithPending(t, Config{Shards: 4, Scatter: 2, Batch: 16, Deadline: 200 * time.Millisecond}, 1000, 8, 60, 300)
	settledBound(t, cs, nodes, 24, 30*time.Second)
	var frames, slots int64
	for s := range 4 {
		frames += metrics.Counter(fmt.Sprintf("shard/%d", s), "batch_frames")
		slots += metrics.Counter(fmt.Sprintf("shard/%d", s), "batch_slots")
	}
	if frames == 0 {
		t.Error("no batch frame evaluated")
	}
	t.Logf("batches sent %d (%d pods), batch frames evaluated %d with %d slots, widened %d", metrics.Counter("intake/0", "batches"),
		metrics.Counter("intake/0", "batched_pods"), frames, slots, metrics.Counter("collector/0", "widened"))
}

// A batch's placements spread like single pods': on empty identical nodes each pod of a batch
// lands on a different node (the node that got a 500m pod is re-scored below the empty ones).
func TestBatchSpreadsOverEmptyNodes(t *testing.T) {
	metrics.Reset()
	cs, _ := startWithPending(t, Config{Shards: 1, Batch: 32, FeasibleToFind: 0}, 8000, 40, 32, 500)
	pods := schedtest.WaitBound(t, cs, "default", 32, 30*time.Second)
	per := map[string]int{}
	for _, p := range pods {
		per[p.Spec.NodeName]++
	}
	if len(per) != 32 {
		t.Errorf("32 pods on %d nodes, want 32 (one per empty node): %v", len(per), per)
	}
	if metrics.Counter("shard/0", "batch_frames") == 0 {
		t.Error("no batch frame evaluated")
	}
}

// Pods a Service selects get kube-scheduler's default topology spread scoring, whose scores
// cannot be reused: their batches are planned with a full cycle per slot, and still never
// over-commit a node.
func TestBatchSequentialWhenSpreadScores(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	var nodes []corev1.Node
	for _, o := range fakeapi.Nodes("seq", 8, 1000, 4096) {
		objs = append(objs, o)
		nodes = append(nodes, *o.(*corev1.Node))
	}
	objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}})
	for i := range 30 {
		p := fakeapi.Pod("default", fmt.Sprintf("web-%02d", i), podspec.DefaultSchedulerName, 300, 64)
		p.Labels = map[string]string{"app": "web"}
		objs = append(objs, p)
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := StartAll(ctx, Config{Client: cs, Shards: 1, Batch: 16, ParallelPods: 2, DeadAfter: -1, Deadline: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	settledBound(t, cs, nodes, 24, 30*time.Second) // 3 per node
	if metrics.Counter("shard/0", "batch_sequential") == 0 {
		t.Error("no batch was planned sequentially: the spread scores were reused")
	}
}

// Parallel pods inside a shard never double-book a node: 4 workers race for the last room of
// 10 nodes (3 pods of 300m fit per node, 60 pods). Run under -race in make test.
func TestParallelPodsNeverDoubleBook(t *testing.T) {
	metrics.Reset()
	cs, nodes := startWithPending(t, Config{Shards: 1, Batch: -1, ParallelPods: 4, Deadline: 200 * time.Millisecond}, 1000, 10, 60, 300)
	settledBound(t, cs, nodes, 30, 60*time.Second)
	t.Logf("parallel conflicts %d, re-checks %d, serialised %d", metrics.Counter("shard/0", "parallel_conflicts"),
		metrics.Counter("shard/0", "reserve_rechecks"), metrics.Counter("shard/0", "parallel_serialised"))
	_ = metav1.ListOptions{}
}
