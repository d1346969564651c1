package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/cluster"
)

// Preemption across shards on a small `up` cluster (4 KWOK nodes of 8 CPU, meganode scheduler
// with 2 shards): every node is filled with low-priority pods, a high-priority pod evicts the
// one victim it needs and is bound on the freed node; low-priority pods created while it is
// nominated do not take the room; no node is over-committed.
func TestMeganodeSchedulerPreemption(t *testing.T) {
	const (
		nodes  = 4
		shards = 2
		ns     = "preempt-e2e"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, cs := upMeganode(ctx, t, cluster.UpOptions{Nodes: nodes, Scheduler: cluster.SchedulerMeganode, SchedulerShards: shards})
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
	never := corev1.PreemptNever
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-low"}, Value: 100},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high-polite"}, Value: 1000, PreemptionPolicy: &never},
	} {
		if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	name := cluster.MeganodeSchedulerName
	withClass := func(p *corev1.Pod, class string, grace int64) *corev1.Pod {
		p.Spec.PriorityClassName = class
		p.Spec.TerminationGracePeriodSeconds = &grace
		return p
	}

	// Two 4-CPU low-priority pods per node: every node full. They get a grace period: victims
	// are deleted gracefully, not forced (KWOK ends them at once).
	var low []*corev1.Pod
	for i := range 2 * nodes {
		low = append(low, withClass(pod(ns, fmt.Sprintf("low-%d", i), name, "4"), "e2e-low", 5))
	}
	create(t, ctx, cs, low)
	waitBound(t, ctx, cs, ns, len(low), 60*time.Second)

	// A high-priority pod that may not preempt stays pending and evicts nothing.
	create(t, ctx, cs, []*corev1.Pod{withClass(pod(ns, "polite", name, "4"), "e2e-high-polite", 0)})
	time.Sleep(2 * time.Second)

	t0 := time.Now()
	create(t, ctx, cs, []*corev1.Pod{withClass(pod(ns, "vip", name, "4"), "e2e-high", 0)})
	// As soon as vip is nominated, low-priority pods race for the room its victim leaves.
	nominated := ""
	for deadline := time.Now().Add(30 * time.Second); nominated == "" && time.Now().Before(deadline); {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "vip", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nominated = p.Status.NominatedNodeName
		if nominated == "" && p.Spec.NodeName != "" {
			t.Fatalf("vip bound to %s without a nomination", p.Spec.NodeName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if nominated == "" {
		t.Fatal("vip not nominated within 30s")
	}
	var thieves []*corev1.Pod
	for i := range 3 {
		thieves = append(thieves, withClass(pod(ns, fmt.Sprintf("thief-%d", i), name, "4"), "e2e-low", 0))
	}
	create(t, ctx, cs, thieves)

	var vip *corev1.Pod
	for deadline := time.Now().Add(60 * time.Second); ; {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "vip", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			vip = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vip (nominated to %s) not bound after 60s", nominated)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("vip nominated to %s, bound to %s %.1fs after its creation", nominated, vip.Spec.NodeName, time.Since(t0).Seconds())
	if vip.Spec.NodeName != nominated {
		t.Errorf("vip bound to %s, nominated to %s", vip.Spec.NodeName, nominated)
	}
	time.Sleep(2 * time.Second) // a wrongful bind of a thief or the polite pod would land now

	pl, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]corev1.Pod{}
	for _, p := range pl.Items {
		left[p.Name] = p
	}
	var gone []string
	for _, p := range low {
		if _, ok := left[p.Name]; !ok {
			gone = append(gone, p.Name)
		}
	}
	if len(gone) != 1 {
		t.Errorf("low-priority pods deleted: %v, want exactly one (one 4-CPU victim makes room)", gone)
	}
	for name, p := range left {
		switch {
		case (strings.HasPrefix(name, "thief-") || name == "polite") && p.Spec.NodeName != "":
			t.Errorf("%s bound to %s: it took room no lower-priority eviction made for it", name, p.Spec.NodeName)
		case strings.HasPrefix(name, "low-") && p.DeletionTimestamp != nil:
			t.Errorf("%s is being deleted too", name)
		}
	}
	checkNoOvercommit(t, ctx, cs)
	if n := schedulerMetric(t, st, "preemptions", "collector/"); n != 1 {
		t.Errorf("collector decided %d preemptions, want 1", n)
	}
	if n := schedulerMetric(t, st, "preemption_victims", "shard/"); n != 1 {
		t.Errorf("shards evicted %d victims, want 1", n)
	}
	t.Logf("evicted %v; preemption_waiting rounds %d", gone, schedulerMetric(t, st, "preemption_waiting", "shard/"))
}
