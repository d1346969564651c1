package shard

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// A placement carried by a frame is assumed in the global view of a shard whose informer has
// not seen the binding yet, and confirmed (not duplicated) when the informer delivers it.
func TestNotePlacedGhost(t *testing.T) {
	cs := fakeapi.NewClient(fakeapi.Node("n1", 4000, 4096, 110, nil), fakeapi.Node("n2", 4000, 4096, 110, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh, err := New(ctx, Config{Index: 0, Count: 1, Client: cs, GlobalView: true})
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

// BenchmarkGlobalViewCost: one shard of 4 over 4000 nodes holding 4000 bound pods; the heap the
// shard adds after its informers synced (heap-MB, the informers' own stores included) and the
// cost of one evaluation plus Reserve/assume/release of a plain pod and of a pod with a zone
// spread constraint, with the global view off and on.
//
//	go test ./internal/scheduler/shard/ -run '^$' -bench GlobalViewCost -benchtime 2000x
func BenchmarkGlobalViewCost(b *testing.B) {
	const nodes, shards = 4000, 4
	for _, bc := range []struct {
		name, view string
		spread     bool
	}{{"off/plain", "off", false}, {"auto/plain", "auto", false}, {"off/spread", "off", true}, {"auto/spread", "auto", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var objs []runtime.Object
			for i := range nodes {
				name := fmt.Sprintf("b-%05d", i)
				objs = append(objs, fakeapi.Node(name, 32000, 256<<10, 110, map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("z%d", i%8)}))
				p := fakeapi.Pod("b", fmt.Sprintf("bound-%05d", i), podspec.DefaultSchedulerName, 100, 64)
				p.Labels = map[string]string{"app": "b"}
				p.Spec.NodeName = name
				objs = append(objs, p)
			}
			cs := fakeapi.NewClient(objs...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			heap0 := heapInUse()
			sh, err := New(ctx, Config{Index: 0, Count: shards, Client: cs, Parallelism: 1, GlobalView: bc.view == "auto"})
			if err != nil {
				b.Fatal(err)
			}
			sh.cfg.Informers.Start(ctx.Done())
			sh.WaitSynced(ctx)
			heap := float64(heapInUse()-heap0) / (1 << 20)
			pod := fakeapi.Pod("b", "probe", podspec.DefaultSchedulerName, 100, 64)
			pod.Labels = map[string]string{"app": "b"}
			if bc.spread {
				pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: pod.Labels}}}
			}
			b.ResetTimer()
			for range b.N {
				sh.mu.Lock()
				res := sh.evaluateLocked(ctx, pod)
				if res.node == "" {
					sh.mu.Unlock()
					b.Fatal(res.reason)
				}
				h := &heldPod{pod: pod, node: res.node, state: res.state, fw: res.fw}
				r := sh.reserveLocked(ctx, h)
				sh.mu.Unlock()
				if r != nil {
					b.Fatal(r.Error)
				}
				sh.release(ctx, h)
			}
			b.ReportMetric(heap, "heap-MB")
		})
	}
}

func heapInUse() uint64 {
	var m goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&m)
	return m.HeapInuse
}
