package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
)

// Verdicts of a class are reused only for nodes whose generation has not moved: a node that
// received a pod is filtered again (and a full node is then found infeasible).
func TestEquivalenceReuseFollowsNodeGeneration(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient(fakeapi.Nodes("e", 10, 1000, 4096)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh, err := New(ctx, Config{Index: 0, Count: 1, Client: cs, Parallelism: 1, EquivalenceTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sh.cfg.Informers.Start(ctx.Done())
	sh.WaitSynced(ctx)
	ctrl := true
	mk := func(i int) *corev1.Pod {
		p := fakeapi.Pod("ns", fmt.Sprintf("e-pod-%d", i), podspec.DefaultSchedulerName, 1000, 64) // a whole node
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
