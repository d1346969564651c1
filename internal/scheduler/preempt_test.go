package scheduler

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// --- whole system on the fake clientset ---

// runningPod is a pod already bound to node with the given priority.
func runningPod(name, node string, milliCPU int64, prio int32) *corev1.Pod {
	p := fakeapi.Pod("default", name, "other-scheduler", milliCPU, 64)
	p.Spec.NodeName = node
	p.Spec.Priority = &prio
	p.Status.Phase = corev1.PodRunning
	return p
}

func pendingPod(name string, milliCPU int64, prio int32, policy corev1.PreemptionPolicy) *corev1.Pod {
	p := fakeapi.Pod("default", name, podspec.DefaultSchedulerName, milliCPU, 64)
	p.Spec.Priority = &prio
	p.Spec.PreemptionPolicy = &policy
	return p
}

// nodesByShard names nodes prefix-NN until every shard owns want[shard] of them.
func nodesByShard(prefix string, want []int) [][]string {
	out := make([][]string, len(want))
	live := wire.AllShards(len(want))
	for i := 0; ; i++ {
		done := true
		for s := range want {
			if len(out[s]) < want[s] {
				done = false
			}
		}
		if done {
			return out
		}
		name := fmt.Sprintf("%s-%02d", prefix, i)
		if s := wire.Owner(name, live); len(out[s]) < want[s] {
			out[s] = append(out[s], name)
		}
	}
}

type deletions struct {
	mu    sync.Mutex
	names []string
}

func (d *deletions) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := append([]string(nil), d.names...)
	sort.Strings(out)
	return out
}

// preemptionCluster starts a meganode System on a fake clientset holding objs, recording pod
// deletions.
func preemptionCluster(t *testing.T, shards int, objs ...runtime.Object) (*fake.Clientset, *deletions) {
	t.Helper()
	metrics.Reset()
	cs := fakeapi.NewClient(objs...)
	del := &deletions{}
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		del.mu.Lock()
		del.names = append(del.names, a.(k8stesting.DeleteAction).GetName())
		del.mu.Unlock()
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := StartAll(ctx, Config{Client: cs, Shards: shards, Fanout: 2, Deadline: 100 * time.Millisecond, DeadAfter: -1}); err != nil {
		t.Fatal(err)
	}
	return cs, del
}

func getPod(t *testing.T, cs *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitPodBound(t *testing.T, cs *fake.Clientset, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := getPod(t, cs, name)
		if p.Spec.NodeName != "" {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not bound after %s (nominated %q)", name, timeout, p.Status.NominatedNodeName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sumPreemptions(shards int, counter string) int64 {
	var n int64
	for s := range shards {
		n += metrics.Counter(fmt.Sprintf("shard/%d", s), counter)
	}
	return n
}

// Every node of three shards is full of lower-priority pods. Each shard's best candidate
// differs; the globally cheapest is on shard 2's target node (its victim has the lowest
// priority, 50, tied with shard 1's best, which needs two victims of 50: the sum decides).
// Exactly that victim is evicted, the pod is nominated there and then bound there.
func TestSystemFakePreemptionEvictsGloballyCheapest(t *testing.T) {
	names := nodesByShard("pre", []int{3, 3, 3})
	target := names[2][0]
	var objs []runtime.Object
	var nodeList []corev1.Node
	for s, ns := range names {
		for i, n := range ns {
			node := fakeapi.Node(n, 1000, 4096, 110, nil)
			objs = append(objs, node)
			nodeList = append(nodeList, *node)
			switch {
			case n == target:
				objs = append(objs, runningPod("cheap-50", n, 500, 50), runningPod("keep-150", n, 500, 150))
			case s == 1 && i == 0: // same highest victim priority (50) but two victims needed
				for j := range 4 {
					objs = append(objs, runningPod(fmt.Sprintf("quarter-%d", j), n, 250, 50))
				}
			default: // shard 0: 300, shard 1: 200, shard 2: 100
				prio := int32(300 - 100*s)
				for j := range 2 {
					objs = append(objs, runningPod(fmt.Sprintf("low-%s-%d", n, j), n, 500, prio))
				}
			}
		}
	}
	cs, del := preemptionCluster(t, 3, objs...)
	schedtest.CreatePods(t, cs, pendingPod("vip", 500, 1000, corev1.PreemptLowerPriority))
	p := waitPodBound(t, cs, "vip", 20*time.Second)
	if p.Spec.NodeName != target {
		t.Errorf("vip bound to %s, want the cheapest candidate %s (shard 2)", p.Spec.NodeName, target)
	}
	if p.Status.NominatedNodeName != target {
		t.Errorf("vip nominated to %q, want %s", p.Status.NominatedNodeName, target)
	}
	if got := del.list(); len(got) != 1 || got[0] != "cheap-50" {
		t.Errorf("deleted %v, want exactly [cheap-50]", got)
	}
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkNoOvercommit(t, nodeList, pods.Items)
	if n := metrics.Counter("collector/0", "preemptions"); n != 1 {
		t.Errorf("collector decided %d preemptions, want 1", n)
	}
	if n, v := metrics.Counter("shard/2", "preemptions"), metrics.Counter("shard/2", "preemption_victims"); n != 1 || v != 1 {
		t.Errorf("shard 2 counted %d preemptions / %d victims, want 1 / 1", n, v)
	}
	if n := sumPreemptions(3, "preemptions"); n != 1 {
		t.Errorf("%d preemptions over all shards, want 1", n)
	}
	if metrics.Counter("shard/0", "preemption_candidates") == 0 || metrics.Counter("shard/1", "preemption_candidates") == 0 {
		t.Errorf("shards 0 and 1 proposed no candidate: the choice was not global")
	}
	dry, ev := metrics.For("shard/2").Hist("preempt_dryrun"), metrics.For("shard/2").Hist("preempt")
	t.Logf("shard 2: dry run p50 %.0f µs (3 nodes), eviction p50 %.0f µs", dry.P50Us, ev.P50Us)
}

// A pod with preemptionPolicy Never evicts nothing and stays pending; the same pod allowed to
// preempt does evict (the setup would have allowed it).
func TestSystemFakePreemptionPolicyNever(t *testing.T) {
	names := nodesByShard("nev", []int{2, 2})
	var objs []runtime.Object
	for _, ns := range names {
		for _, n := range ns {
			objs = append(objs, fakeapi.Node(n, 1000, 4096, 110, nil), runningPod("low-"+n, n, 1000, 0))
		}
	}
	cs, del := preemptionCluster(t, 2, objs...)
	schedtest.CreatePods(t, cs, pendingPod("polite", 500, 1000, corev1.PreemptNever))
	time.Sleep(2 * time.Second) // several unschedulable rounds
	if p := getPod(t, cs, "polite"); p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Errorf("preemptionPolicy Never pod bound to %q / nominated to %q", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
	if got := del.list(); len(got) != 0 {
		t.Errorf("preemptionPolicy Never evicted %v", got)
	}
	if n := sumPreemptions(2, "preemption_candidates"); n != 0 {
		t.Errorf("%d preemption candidates proposed for a Never pod", n)
	}
	if metrics.Counter("collector/0", "unschedulable") == 0 {
		t.Error("the Never pod was not even retried as unschedulable")
	}
	schedtest.CreatePods(t, cs, pendingPod("pushy", 500, 1000, corev1.PreemptLowerPriority))
	waitPodBound(t, cs, "pushy", 20*time.Second)
	if got := del.list(); len(got) != 1 {
		t.Errorf("the control pod evicted %v, want one victim", got)
	}
}

// Pods of equal or higher priority are never victims: a pod that only fits by evicting one of
// them stays pending; one that fits by evicting a lower-priority pod evicts exactly that one.
func TestSystemFakePreemptionSparesEqualAndHigherPriority(t *testing.T) {
	names := nodesByShard("eq", []int{2, 2})
	prio := map[string]int32{}
	run := func(name, node string, cpu int64, p int32) *corev1.Pod {
		prio[name] = p
		return runningPod(name, node, cpu, p)
	}
	var objs []runtime.Object
	// One node per shard: 600m of equal (shard 0) or higher (shard 1) priority + 400m of 5.
	// The others: full with equal or higher priority pods only.
	for s, ns := range names {
		objs = append(objs, fakeapi.Node(ns[0], 1000, 4096, 110, nil), fakeapi.Node(ns[1], 1000, 4096, 110, nil))
		objs = append(objs, run("big-"+ns[0], ns[0], 600, int32(100+100*s)), run("low-"+ns[0], ns[0], 400, 5))
		objs = append(objs, run("full-"+ns[1], ns[1], 1000, int32(100+50*s)))
	}
	cs, del := preemptionCluster(t, 2, objs...)
	// Needs 500m: evicting the 400m low-priority pod is not enough anywhere.
	schedtest.CreatePods(t, cs, pendingPod("wide", 500, 100, corev1.PreemptLowerPriority))
	time.Sleep(2 * time.Second)
	if got := del.list(); len(got) != 0 {
		t.Fatalf("evicted %v: only equal/higher-priority pods could have made room", got)
	}
	if p := getPod(t, cs, "wide"); p.Spec.NodeName != "" {
		t.Fatalf("wide bound to %s", p.Spec.NodeName)
	}
	// Needs 300m: evicting one 400m priority-5 pod makes room.
	schedtest.CreatePods(t, cs, pendingPod("narrow", 300, 100, corev1.PreemptLowerPriority))
	p := waitPodBound(t, cs, "narrow", 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	got := del.list()
	if len(got) != 1 || got[0] != "low-"+p.Spec.NodeName {
		t.Errorf("deleted %v, want exactly the priority-5 pod of %s", got, p.Spec.NodeName)
	}
	for _, name := range got {
		if prio[name] >= 100 {
			t.Errorf("victim %s has priority %d ≥ the preemptor's 100", name, prio[name])
		}
	}
	if p := getPod(t, cs, "wide"); p.Spec.NodeName != "" {
		t.Errorf("wide bound to %s", p.Spec.NodeName)
	}
}

// While the preemptor waits to be retried, lower-priority pods created after its nomination do
// not take the room its victim freed (the shard's nominator counts it in Filter): exactly one
// victim, the preemptor bound there, the thieves pending.
func TestSystemFakePreemptorKeepsFreedRoom(t *testing.T) {
	names := nodesByShard("room", []int{2, 2})
	var objs []runtime.Object
	for _, ns := range names {
		for _, n := range ns {
			objs = append(objs, fakeapi.Node(n, 1000, 4096, 110, nil), runningPod("low-"+n, n, 1000, 0))
		}
	}
	cs, del := preemptionCluster(t, 2, objs...)
	schedtest.CreatePods(t, cs, pendingPod("vip", 1000, 1000, corev1.PreemptLowerPriority))
	nominated := ""
	for deadline := time.Now().Add(10 * time.Second); nominated == ""; time.Sleep(5 * time.Millisecond) {
		p := getPod(t, cs, "vip")
		if p.Spec.NodeName != "" {
			t.Fatalf("vip bound to %s before the thieves were created", p.Spec.NodeName)
		}
		if nominated = p.Status.NominatedNodeName; nominated == "" && time.Now().After(deadline) {
			t.Fatal("vip never nominated")
		}
	}
	for i := range 3 {
		schedtest.CreatePods(t, cs, pendingPod(fmt.Sprintf("thief-%d", i), 600, 0, corev1.PreemptLowerPriority))
	}
	p := waitPodBound(t, cs, "vip", 20*time.Second)
	if p.Spec.NodeName != nominated {
		t.Errorf("vip bound to %s, nominated to %s", p.Spec.NodeName, nominated)
	}
	time.Sleep(time.Second)
	for i := range 3 {
		if n := getPod(t, cs, fmt.Sprintf("thief-%d", i)).Spec.NodeName; n != "" {
			t.Errorf("thief-%d bound to %s", i, n)
		}
	}
	if got := del.list(); len(got) != 1 || got[0] != "low-"+nominated {
		t.Errorf("deleted %v, want exactly [low-%s]", got, nominated)
	}
}

// Victims that take a while to terminate (graceful deletion): the preemptor's retries find
// them still terminating and wait (PreemptWait) instead of evicting on other nodes; once they
// are gone it binds on its nominated node.
func TestSystemFakePreemptorWaitsForTerminatingVictims(t *testing.T) {
	names := nodesByShard("grace", []int{2, 2})
	var objs []runtime.Object
	for _, ns := range names {
		for _, n := range ns {
			objs = append(objs, fakeapi.Node(n, 1000, 4096, 110, nil), runningPod("low-"+n, n, 1000, 0))
		}
	}
	cs, del := preemptionCluster(t, 2, objs...)
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		o, err := cs.Tracker().Get(podsGVR, "default", name)
		if err != nil {
			return true, nil, err
		}
		p := o.(*corev1.Pod).DeepCopy()
		now := metav1.Now()
		p.DeletionTimestamp = &now
		del.mu.Lock()
		del.names = append(del.names, name)
		del.mu.Unlock()
		time.AfterFunc(1500*time.Millisecond, func() { _ = cs.Tracker().Delete(podsGVR, "default", name) })
		return true, nil, cs.Tracker().Update(podsGVR, p, "default")
	})
	began := time.Now()
	schedtest.CreatePods(t, cs, pendingPod("vip", 1000, 1000, corev1.PreemptLowerPriority))
	p := waitPodBound(t, cs, "vip", 20*time.Second)
	if el := time.Since(began); el < 1500*time.Millisecond {
		t.Errorf("vip bound after %s, before its victim terminated", el)
	}
	if p.Spec.NodeName != p.Status.NominatedNodeName {
		t.Errorf("vip bound to %s, nominated to %s", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
	if got := del.list(); len(got) != 1 || got[0] != "low-"+p.Spec.NodeName {
		t.Errorf("deleted %v, want exactly [low-%s]", got, p.Spec.NodeName)
	}
	if sumPreemptions(2, "preemption_waiting") == 0 {
		t.Error("no retry waited for the terminating victim")
	}
	victim, err := cs.Tracker().Get(podsGVR, "default", "low-"+p.Spec.NodeName)
	if err == nil {
		t.Errorf("victim still there: %v", victim)
	}
}

// PodDisruptionBudgets count first, across shards: the victim protected by an exhausted budget
// (lowest priority, on shard 0) is spared for a higher-priority one on shard 1 whose eviction
// violates nothing.
func TestSystemFakePreemptionPrefersNoPDBViolation(t *testing.T) {
	names := nodesByShard("pdb", []int{2, 2})
	guarded := runningPod("guarded", names[0][0], 1000, 10)
	guarded.Labels = map[string]string{"app": "guarded"}
	objs := []runtime.Object{
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guard"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}},
		fakeapi.Node(names[0][0], 1000, 4096, 110, nil), guarded,
		fakeapi.Node(names[1][0], 1000, 4096, 110, nil), runningPod("unguarded", names[1][0], 1000, 500),
		fakeapi.Node(names[0][1], 1000, 4096, 110, nil), runningPod("high-0", names[0][1], 1000, 800),
		fakeapi.Node(names[1][1], 1000, 4096, 110, nil), runningPod("high-1", names[1][1], 1000, 800),
	}
	cs, del := preemptionCluster(t, 2, objs...)
	schedtest.CreatePods(t, cs, pendingPod("vip", 1000, 1000, corev1.PreemptLowerPriority))
	p := waitPodBound(t, cs, "vip", 20*time.Second)
	if got := del.list(); len(got) != 1 || got[0] != "unguarded" || p.Spec.NodeName != names[1][0] {
		t.Errorf("deleted %v, vip on %s; want [unguarded] and %s (the guarded pod's budget is exhausted)", got, p.Spec.NodeName, names[1][0])
	}
}

// The same over the distributed roles (gRPC, JSON control messages): 2 shards, a collector.
func TestRolesOverGRPCPreemption(t *testing.T) {
	metrics.Reset()
	names := nodesByShard("gp", []int{2, 2})
	var objs []runtime.Object
	for s, ns := range names {
		for i, n := range ns {
			objs = append(objs, fakeapi.Node(n, 1000, 4096, 110, nil), runningPod("low-"+n, n, 1000, int32(100*(s+1)+i)))
		}
	}
	cheapest := "low-" + names[0][0] // priority 100
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Client: cs, Shards: 2, Deadline: 200 * time.Millisecond}
	shardAddrs := []string{freeAddr(t), freeAddr(t)}
	colAddr := freeAddr(t)
	run := roleRunner(ctx, t, cfg)
	for i, a := range shardAddrs {
		run("shard", RoleConfig{Index: i, Listen: a, Collectors: []string{colAddr}})
	}
	root := freeAddr(t)
	run("relay", RoleConfig{Listen: root, Children: shardAddrs})
	run("collector", RoleConfig{Index: 0, Listen: colAddr, ShardAddrs: shardAddrs, Root: root})
	time.Sleep(500 * time.Millisecond)
	schedtest.CreatePods(t, cs, pendingPod("vip", 1000, 1000, corev1.PreemptLowerPriority))
	p := waitPodBound(t, cs, "vip", 30*time.Second)
	if p.Spec.NodeName != names[0][0] {
		t.Errorf("vip bound to %s, want %s", p.Spec.NodeName, names[0][0])
	}
	pl, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range pl.Items {
		if q.Name == cheapest {
			t.Errorf("%s (the cheapest victim) still there", cheapest)
		}
	}
	if len(pl.Items) != len(objs)/2 {
		t.Errorf("%d pods left, want %d (one victim out, vip in)", len(pl.Items), len(objs)/2)
	}
}
