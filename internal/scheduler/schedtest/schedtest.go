// Package schedtest holds what the tests of the scheduler's packages share: waiting for a
// condition, creating pods and waiting for them to be bound on a (fake) apiserver, a frame sink
// and a decision sink that record what they are sent, and admission reviews as kube-apiserver
// sends them. Only tests import it.
package schedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Eventually fails t unless cond holds within 2 s (polled every 10 ms).
func Eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 2s")
}

// WaitFor fails t unless cond holds within timeout (polled every 20 ms); what names it.
func WaitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CreatePods creates the pods through cs.
func CreatePods(t *testing.T, cs kubernetes.Interface, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// WaitBound waits until want pods in ns are bound or the timeout passes; returns the pods.
func WaitBound(t *testing.T, cs kubernetes.Interface, ns string, want int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pl, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pl.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		if n >= want || time.Now().After(deadline) {
			return pl.Items
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CountSink is a wire.FrameSink that counts the frames it takes and keeps the last one; with
// Block set, each Send waits for Block to yield (or close) first.
type CountSink struct {
	N     atomic.Int64
	Block chan struct{}
	mu    sync.Mutex
	last  []byte
}

// Send implements wire.FrameSink.
func (c *CountSink) Send(ctx context.Context, f []byte) error {
	if c.Block != nil {
		select {
		case <-c.Block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	c.last = f
	c.mu.Unlock()
	c.N.Add(1)
	return nil
}

// Last is the last frame taken.
func (c *CountSink) Last() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// RecShard is a wire.DecisionSink (a shard as collectors see it) that records the decisions.
type RecShard struct {
	mu sync.Mutex
	d  []wire.Decision
}

// Decide implements wire.DecisionSink.
func (r *RecShard) Decide(_ context.Context, d wire.Decision) error {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
	return nil
}

// Decisions are the decisions recorded so far.
func (r *RecShard) Decisions() []wire.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Decision(nil), r.d...)
}

// Review is an AdmissionReview for obj as kube-apiserver sends it (admission.k8s.io/v1, JSON).
func Review(t *testing.T, obj any, kind metav1.GroupVersionKind, op admissionv1.Operation, dryRun bool) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID(fmt.Sprintf("req-%d", time.Now().UnixNano())), Kind: kind,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Operation: op, DryRun: &dryRun,
			Object: runtime.RawExtension{Raw: raw}},
	}
	if p, ok := obj.(*corev1.Pod); ok {
		r.Request.Namespace, r.Request.Name = p.Namespace, p.Name
	}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PodKind is the kind of a pod review.
var PodKind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
