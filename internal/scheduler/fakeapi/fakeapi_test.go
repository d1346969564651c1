package fakeapi

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/meganode/meganode/internal/scheduler/podspec"
)

// The counting fake takes a pod's first Binding and refuses the second, as kube-apiserver does,
// without writing the pod.
func TestCountingBindsRefuseASecondBinding(t *testing.T) {
	ctx := context.Background()
	cs, ledger := NewClientCountingBinds(Pod("ns", "p", podspec.DefaultSchedulerName, 100, 64))
	bind := func(node string) error {
		return cs.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
	}
	if err := bind("n1"); err != nil {
		t.Fatal(err)
	}
	if err := bind("n2"); !apierrors.IsConflict(err) {
		t.Fatalf("second binding: got %v, want Conflict", err)
	}
	if got := ledger.PerNode(); ledger.Count() != 1 || got["n1"] != 1 {
		t.Fatalf("ledger: %v", got)
	}
	p, err := cs.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the stored pod changed: %v %q", err, p.Spec.NodeName)
	}
}

// The lean counting fake serves its nodes and pods to LIST and GET without the tracker, and
// counts Bindings as the counting fake does.
func TestLeanCountingBinds(t *testing.T) {
	ctx := context.Background()
	objs := append(Nodes("n", 3, 8000, 32<<10), Pod("ns", "p", podspec.DefaultSchedulerName, 100, 64),
		Pod("other", "q", podspec.DefaultSchedulerName, 100, 64))
	cs, ledger, lean := NewClientCountingBindsLean(objs...)
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nl.Items) != 3 {
		t.Fatalf("nodes: %v %d", err, len(nl.Items))
	}
	pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != 2 {
		t.Fatalf("pods: %v %d", err, len(pl.Items))
	}
	if pl, err = cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); err != nil || len(pl.Items) != 1 || pl.Items[0].Name != "p" {
		t.Fatalf("pods in ns: %v %v", err, pl.Items)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "n-2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(ctx, "q", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod in another namespace: got %v, want NotFound", err)
	}
	// Handed over to informers: the same answers from their store.
	f := informers.NewSharedInformerFactory(cs, 0)
	nodes, pods := f.Core().V1().Nodes().Lister(), f.Core().V1().Pods().Lister()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	lean.ServeFrom(nodes, pods)
	if nl, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nl.Items) != 3 {
		t.Fatalf("nodes from the informer: %v %d", err, len(nl.Items))
	}
	if pl, err = cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); err != nil || len(pl.Items) != 1 || pl.Items[0].Name != "p" {
		t.Fatalf("pods in ns from the informer: %v %v", err, pl.Items)
	}
	if _, err := cs.CoreV1().Pods("other").Get(ctx, "q", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"n-0", "n-1"} {
		err := cs.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
		if (i == 0) != (err == nil) || (i == 1 && !apierrors.IsConflict(err)) {
			t.Fatalf("binding %d: %v", i, err)
		}
	}
	if b := ledger.Binds(); ledger.Count() != 1 || len(b) != 1 || b[0] != (Bind{Pod: "ns/p", Node: "n-0"}) || ledger.PerNode()["n-0"] != 1 {
		t.Fatalf("ledger: %v %v", b, ledger.PerNode())
	}
	if p, err := cs.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the stored pod changed: %v", err)
	}
}
