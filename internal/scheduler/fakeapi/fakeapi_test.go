package fakeapi

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
