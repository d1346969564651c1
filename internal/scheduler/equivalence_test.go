package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meganode/meganode/internal/scheduler/metrics"
)

func TestPodSignature(t *testing.T) {
	ctrl := true
	own := func(uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: types.UID("rs-" + uid), Controller: &ctrl}}
	}
	a, b := FakePod("ns", "a", DefaultSchedulerName, 100, 64), FakePod("ns", "b", DefaultSchedulerName, 100, 64)
	a.OwnerReferences, b.OwnerReferences = own("1"), own("1")
	sa, _ := podSignature(a)
	sb, _ := podSignature(b)
	if string(sa) != string(sb) {
		t.Fatal("identical pods of one owner have different signatures")
	}
	c := b.DeepCopy()
	c.Spec.NodeSelector = map[string]string{"zone": "b"}
	if sc, _ := podSignature(c); string(sc) == string(sa) {
		t.Fatal("node selector not in the signature")
	}
	d := FakePod("ns", "d", DefaultSchedulerName, 200, 64)
	if sd, _ := podSignature(d); string(sd) == string(sa) {
		t.Fatal("requests not in the signature")
	}
}

// Verdicts of a class are reused only for nodes whose generation has not moved: a node that
// received a pod is filtered again (and a full node is then found infeasible).
func TestEquivalenceReuseFollowsNodeGeneration(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	for i := range 10 {
		objs = append(objs, FakeNode(fmt.Sprintf("e-%d", i), 1000, 4096, 110, nil))
	}
	cs := NewFakeClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh, err := NewShard(ctx, ShardConfig{Index: 0, Count: 1, Client: cs, Parallelism: 1, EquivalenceTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sh.cfg.Informers.Start(ctx.Done())
	sh.WaitSynced(ctx)
	ctrl := true
	mk := func(i int) *corev1.Pod {
		p := FakePod("ns", fmt.Sprintf("e-pod-%d", i), DefaultSchedulerName, 1000, 64) // a whole node
		p.UID = types.UID(fmt.Sprintf("e-uid-%d", i))
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &ctrl}}
		return p
	}
	used := map[string]bool{}
	for i := range 10 {
		sh.mu.Lock()
		res := sh.evaluateLocked(ctx, mk(i))
		if res.node == "" || used[res.node] {
			sh.mu.Unlock()
			t.Fatalf("pod %d: node %q (reason %q), used %v", i, res.node, res.reason, used)
		}
		used[res.node] = true
		if r := sh.reserveLocked(ctx, &heldPod{pod: mk(i), node: res.node, state: res.state}); r != nil {
			sh.mu.Unlock()
			t.Fatal(r.Error)
		}
		sh.mu.Unlock()
		// Every pod after the first re-filters only the node the previous pod took.
		if i > 0 {
			if got, want := metrics.Counter("shard/0", "filter_reused"), int64(9*i); got != want {
				t.Fatalf("after pod %d: %d verdicts reused, want %d (9 unchanged nodes per pod)", i, got, want)
			}
		}
	}
	// All ten nodes are full now: the next pod of the class fits nowhere, despite the cache.
	sh.mu.Lock()
	res := sh.evaluateLocked(ctx, mk(10))
	sh.mu.Unlock()
	if res.node != "" {
		t.Fatalf("stale equivalence verdict: pod placed on full node %s", res.node)
	}
	if metrics.Counter("shard/0", "filter_reused") == 0 {
		t.Fatal("no verdict was ever reused")
	}
}
