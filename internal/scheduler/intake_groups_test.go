package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

func TestGroupGateOneInFlightPerGroup(t *testing.T) {
	var woken []string
	g := newGroupGate(func(k string) { woken = append(woken, k) })
	a0, b0, c0 := wire.AttemptKey{UID: "a"}, wire.AttemptKey{UID: "b"}, wire.AttemptKey{UID: "c"}
	if !g.acquire("ns", "ns/a", a0) {
		t.Fatal("first pod of a group must go")
	}
	if g.acquire("ns", "ns/b", b0) || g.acquire("ns", "ns/c", c0) {
		t.Fatal("second and third pods of the group must wait")
	}
	if g.acquire("ns", "ns/b", b0) { // sent again while parked: still parked, listed once
		t.Fatal("parked pod went")
	}
	if !g.acquire("", "ns/plain", wire.AttemptKey{UID: "p"}) || !g.acquire("other", "other/x", wire.AttemptKey{UID: "x"}) {
		t.Fatal("unconstrained pods and other groups must not wait")
	}
	g.release(wire.AttemptKey{UID: "a", Attempt: 1}, nil) // a stale attempt frees nothing
	if len(woken) != 0 {
		t.Fatalf("woken %v by a stale release", woken)
	}
	g.release(a0, &wire.Placement{UID: "a", Node: "n1"})
	if !slices.Equal(woken, []string{"ns/b"}) {
		t.Fatalf("woken %v, want [ns/b]", woken)
	}
	if g.acquire("ns", "ns/c", c0) {
		t.Fatal("c took the slot handed to b")
	}
	g.drop("ns/b") // b was deleted meanwhile: the slot goes to c
	if !slices.Equal(woken, []string{"ns/b", "ns/c"}) {
		t.Fatalf("woken %v, want [ns/b ns/c]", woken)
	}
	if !g.acquire("ns", "ns/c", c0) {
		t.Fatal("c was handed the slot")
	}
	pl := g.placements()
	if len(pl) != 1 || pl[0] != (wire.Placement{UID: "a", Namespace: "ns", Name: "a", Node: "n1"}) {
		t.Fatalf("placements %+v", pl)
	}
	g.release(c0, nil) // requeued: no placement, nobody waiting
	if len(g.slots) != 1 || len(g.placements()) != 1 {
		t.Fatalf("slots %v placements %v", g.slots, g.placements())
	}
}

// A placement carried by a frame is assumed in the global view of a shard whose informer has
// not seen the binding yet, and confirmed (not duplicated) when the informer delivers it.
func TestNotePlacedGhost(t *testing.T) {
	cs := fakeapi.NewClient(fakeapi.Node("n1", 4000, 4096, 110, nil), fakeapi.Node("n2", 4000, 4096, 110, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh, err := NewShard(ctx, ShardConfig{Index: 0, Count: 1, Client: cs, GlobalView: true})
	if err != nil {
		t.Fatal(err)
	}
	sh.cfg.Informers.Start(ctx.Done())
	sh.WaitSynced(ctx)
	p := fakeapi.Pod("default", "p", podspec.DefaultSchedulerName, 100, 64)
	schedtest.CreatePods(t, cs, p)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, ok, _ := sh.pods.GetStore().GetByKey("default/p"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod not in the informer store")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sh.notePlaced(ctx, []wire.Placement{{UID: string(p.UID), Namespace: "default", Name: "p", Node: "n2"}})
	got, err := sh.gv.cache.GetPod(p)
	if err != nil || got.Spec.NodeName != "n2" {
		t.Fatalf("ghost: %v %v", got, err)
	}
	if assumed, _ := sh.gv.cache.IsAssumedPod(p); !assumed {
		t.Fatal("ghost not assumed")
	}
	// The binding arrives through the informer: the ghost is confirmed.
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n2"
	if _, err := cs.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if assumed, _ := sh.gv.cache.IsAssumedPod(p); !assumed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ghost never confirmed by the informer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, _ := sh.gv.cache.PodCount(); n != 1 {
		t.Fatalf("%d pods in the global cache, want 1", n)
	}
}
