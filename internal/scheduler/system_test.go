package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// checkNoOvercommit: sum of CPU requests per node ≤ allocatable.
func checkNoOvercommit(t *testing.T, nodes []corev1.Node, pods []corev1.Pod) map[string]int64 {
	t.Helper()
	used := map[string]int64{}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		for _, c := range p.Spec.Containers {
			used[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	for _, n := range nodes {
		if a := n.Status.Allocatable.Cpu().MilliValue(); used[n.Name] > a {
			t.Errorf("node %s over-committed: %dm requested of %dm", n.Name, used[n.Name], a)
		}
	}
	return used
}

func TestSystemFakeRaceForLastCapacity(t *testing.T) {
	metrics.Reset()
	const nodes, shards = 12, 3
	var objs []runtime.Object
	var nodeList []corev1.Node
	for i := range nodes {
		n := fakeapi.Node(fmt.Sprintf("node-%02d", i), 1000, 4096, 110, nil)
		objs = append(objs, n)
		nodeList = append(nodeList, *n)
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := StartAll(ctx, Config{Client: cs, Shards: shards, Fanout: 2, Deadline: 100 * time.Millisecond, DeadAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	// 3 pods of 300m fit per node: 36 fit, 60 race for them.
	const pods = 60
	for i := range pods {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, fakeapi.Pod("default", fmt.Sprintf("p-%03d", i), podspec.DefaultSchedulerName, 300, 64), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := schedtest.WaitBound(t, cs, "default", nodes*3, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // let any wrong extra bind land before checking
	got = schedtest.WaitBound(t, cs, "default", 0, 0)
	bound := 0
	for _, p := range got {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	used := checkNoOvercommit(t, nodeList, got)
	if bound != nodes*3 {
		t.Errorf("bound %d pods, want %d (capacity for 3 per node): %v", bound, nodes*3, used)
	}
	if sys.Pending() != pods-nodes*3 {
		t.Errorf("intake tracks %d pending pods, want %d", sys.Pending(), pods-nodes*3)
	}
	t.Logf("bound %d, conflicts %d, unschedulable %d, requeued %d", bound,
		metrics.Counter("collector/0", "conflicts"), metrics.Counter("collector/0", "unschedulable"), metrics.Counter("collector/0", "requeued"))
	_ = resource.MustParse
}

func TestSystemFakeSelectorsAndTaints(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	taint := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	tainted := map[string]bool{}
	zone := map[string]string{}
	for i := range 16 {
		name := fmt.Sprintf("n-%02d", i)
		z := []string{"a", "b"}[i%2]
		zone[name] = z
		var n *corev1.Node
		if i%4 == 3 {
			n = fakeapi.Node(name, 4000, 8192, 110, map[string]string{"zone": z}, taint)
			tainted[name] = true
		} else {
			n = fakeapi.Node(name, 4000, 8192, 110, map[string]string{"zone": z})
		}
		objs = append(objs, n)
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := StartAll(ctx, Config{Client: cs, Shards: 4, Fanout: 2, DeadAfter: -1}); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range 20 {
		p := fakeapi.Pod("default", fmt.Sprintf("zb-%02d", i), podspec.DefaultSchedulerName, 100, 64)
		p.Spec.NodeSelector = map[string]string{"zone": "b"}
		pods = append(pods, p)
	}
	for i := range 20 {
		pods = append(pods, fakeapi.Pod("default", fmt.Sprintf("plain-%02d", i), podspec.DefaultSchedulerName, 100, 64))
	}
	for i := range 10 {
		p := fakeapi.Pod("default", fmt.Sprintf("gpu-%02d", i), podspec.DefaultSchedulerName, 100, 64)
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.NodeSelector = map[string]string{"zone": "a"}
		pods = append(pods, p)
	}
	// A pod nothing fits stays pending (and is retried, never bound).
	impossible := fakeapi.Pod("default", "impossible", podspec.DefaultSchedulerName, 100, 64)
	impossible.Spec.NodeSelector = map[string]string{"zone": "c"}
	pods = append(pods, impossible)
	schedtest.CreatePods(t, cs, pods...)
	got := schedtest.WaitBound(t, cs, "default", 50, 30*time.Second)
	bound := 0
	for _, p := range got {
		if p.Spec.NodeName == "" {
			if p.Name != "impossible" {
				t.Errorf("%s not bound", p.Name)
			}
			continue
		}
		bound++
		switch {
		case p.Name == "impossible":
			t.Errorf("impossible pod bound to %s", p.Spec.NodeName)
		case p.Name[:2] == "zb" && zone[p.Spec.NodeName] != "b":
			t.Errorf("%s (zone=b) on %s in zone %s", p.Name, p.Spec.NodeName, zone[p.Spec.NodeName])
		case p.Name[:5] == "plain" && tainted[p.Spec.NodeName]:
			t.Errorf("%s (no toleration) on tainted %s", p.Name, p.Spec.NodeName)
		case p.Name[:3] == "gpu" && zone[p.Spec.NodeName] != "a":
			t.Errorf("%s (zone=a) on %s", p.Name, p.Spec.NodeName)
		}
	}
	if bound != 50 {
		t.Errorf("bound %d, want 50", bound)
	}
	checkSchedulingEvents(t, cs, got)
}

// checkSchedulingEvents: every bound pod has kube-scheduler's Scheduled event naming its node,
// every unbound one a FailedScheduling event, both reported by the pod's scheduler name
// (events are recorded asynchronously: wait up to 10 s).
func checkSchedulingEvents(t *testing.T, cs kubernetes.Interface, pods []corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		el, err := cs.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		byPod := map[string][]string{}
		for _, e := range el.Items {
			if e.Regarding.Kind != "Pod" || e.ReportingController == "" {
				continue
			}
			byPod[e.Regarding.Name] = append(byPod[e.Regarding.Name], e.ReportingController+" "+e.Reason+" "+e.Note)
		}
		var missing []string
		for _, p := range pods {
			want := fmt.Sprintf("%s Scheduled Successfully assigned %s/%s to %s", p.Spec.SchedulerName, p.Namespace, p.Name, p.Spec.NodeName)
			if p.Spec.NodeName == "" {
				want = p.Spec.SchedulerName + " FailedScheduling "
			}
			found := false
			for _, e := range byPod[p.Name] {
				found = found || strings.HasPrefix(e, want)
			}
			if !found {
				missing = append(missing, fmt.Sprintf("%s: want %q, have %q", p.Name, want, byPod[p.Name]))
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods lack their scheduling event, e.g. %s", len(missing), len(pods), missing[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSystemFakeKilledShardTakenOver(t *testing.T) {
	metrics.Reset()
	const nodes = 24
	var objs []runtime.Object
	var nodeList []corev1.Node
	for i := range nodes {
		n := fakeapi.Node(fmt.Sprintf("k-%02d", i), 1000, 4096, 110, nil)
		objs = append(objs, n)
		nodeList = append(nodeList, *n)
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := StartAll(ctx, Config{Client: cs, Shards: 3, Fanout: 2, Deadline: 50 * time.Millisecond, DeadAfter: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var first []*corev1.Pod
	for i := range 24 {
		first = append(first, fakeapi.Pod("default", fmt.Sprintf("a-%02d", i), podspec.DefaultSchedulerName, 200, 64))
	}
	schedtest.CreatePods(t, cs, first...)
	schedtest.WaitBound(t, cs, "default", 24, 20*time.Second)
	victimNodes := map[string]bool{}
	for _, n := range nodeList {
		if wire.Owner(n.Name, wire.AllShards(3)) == 1 {
			victimNodes[n.Name] = true
		}
	}
	sys.KillShard(1)
	// 24 × 200m fill 4.8 of 24 cores; 72 more need most nodes, shard 1's included.
	var more []*corev1.Pod
	for i := range 72 {
		more = append(more, fakeapi.Pod("default", fmt.Sprintf("b-%02d", i), podspec.DefaultSchedulerName, 200, 64))
	}
	schedtest.CreatePods(t, cs, more...)
	got := schedtest.WaitBound(t, cs, "default", 96, 60*time.Second)
	checkNoOvercommit(t, nodeList, got)
	bound, onVictim := 0, 0
	for _, p := range got {
		if p.Spec.NodeName != "" {
			bound++
			if victimNodes[p.Spec.NodeName] && p.Name[0] == 'b' {
				onVictim++
			}
		}
	}
	if bound != 96 {
		t.Fatalf("bound %d of 96 after killing shard 1", bound)
	}
	if metrics.Counter("collector/0", "shards_declared_dead") != 1 || len(sys.Live()) != 2 {
		t.Fatalf("shard 1 not declared dead: live %v", sys.Live())
	}
	if onVictim == 0 {
		t.Fatalf("no pod landed on the dead shard's %d nodes: not taken over", len(victimNodes))
	}
	t.Logf("%d pods landed on the %d nodes taken over from shard 1", onVictim, len(victimNodes))
}

// Binds that fail (the apiserver refuses, a transient error) are conflicts: the collector
// requeues the pod, a later attempt binds it, nothing is dropped or bound twice.
func TestSystemFakeBindFailuresRequeued(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient(fakeapi.Nodes("f", 6, 4000, 8192)...)
	var failed atomic.Int64
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" && failed.Add(1) <= 20 {
			return true, nil, apierrors.NewInternalError(fmt.Errorf("injected bind failure"))
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := StartAll(ctx, Config{Client: cs, Shards: 2, DeadAfter: -1}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		schedtest.CreatePods(t, cs, fakeapi.Pod("default", fmt.Sprintf("bf-%02d", i), podspec.DefaultSchedulerName, 100, 64))
	}
	got := schedtest.WaitBound(t, cs, "default", 30, 30*time.Second)
	bound := 0
	for _, p := range got {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	if bound != 30 {
		t.Fatalf("%d of 30 bound", bound)
	}
	if c := metrics.Counter("collector/0", "conflicts"); c < 20 {
		t.Fatalf("%d conflicts requeued, want ≥ 20 injected bind failures", c)
	}
	// The shard counts a bind after the apiserver answered it, so the last count may trail the
	// binding the watch already showed by a moment; it must settle at exactly 30.
	binds := func() int64 { return metrics.Counter("shard/0", "bound") + metrics.Counter("shard/1", "bound") }
	for deadline := time.Now().Add(2 * time.Second); binds() < 30 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a 31st bind would show up here
	if b := binds(); b != 30 {
		t.Fatalf("shards report %d successful binds for 30 pods", b)
	}
}
