// Package fakeapi is the apiserver the scheduler's tests and its in-process simulator run
// against: client-go's fake clientset with a Binding subresource that behaves like
// kube-apiserver's (or only counts Bindings), and ready-made nodes and pods. Tests of several
// role packages and the simulator use it, so it is a package of its own.
package fakeapi

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// NewClient is a fake clientset (no apiserver) whose pods/binding subresource behaves like
// kube-apiserver's: it sets spec.nodeName and refuses a pod that is already assigned
// (Conflict) or gone (NotFound). Simulator and unit tests run the real framework against it.
func NewClient(objs ...runtime.Object) *fake.Clientset {
	cs, _ := NewClientRecordingBinds(objs...)
	return cs
}

// NewClientRecordingBinds is NewClient that also records every Binding it took, in order, in
// the returned ledger: the pods are written (every informer sees the binding) and the ledger
// gives the order and the placements without a LIST.
func NewClientRecordingBinds(objs ...runtime.Object) (*fake.Clientset, *BindLedger) {
	// NewClientset's field-managed tracker builds a REST mapper per write (a quarter of the
	// simulator's CPU), but NewSimpleClientset's watchers panic when 100 events queue up; the
	// stage costs the projection uses are per-shard timings that exclude the fake's writes.
	cs := fake.NewClientset(objs...)
	l := &BindLedger{nodes: map[string]string{}}
	onBinding(cs, func(ns string, b *corev1.Binding) error {
		o, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), ns, b.Name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod).DeepCopy()
		if b.UID != "" && p.UID != b.UID {
			return apierrors.NewConflict(corev1.Resource("pods"), b.Name, fmt.Errorf("uid mismatch"))
		}
		if p.Spec.NodeName != "" {
			return alreadyAssigned(b.Name, p.Spec.NodeName)
		}
		p.Spec.NodeName = b.Target.Name
		if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, ns); err != nil {
			return err
		}
		l.record(ns+"/"+b.Name, b.Target.Name)
		return nil
	})
	return cs, l
}

// onBinding makes bind answer every pods/binding create on cs (nil: the Binding is taken).
func onBinding(cs *fake.Clientset, bind func(ns string, b *corev1.Binding) error) {
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if err := bind(a.GetNamespace(), b); err != nil {
			return true, nil, err
		}
		return true, b, nil
	})
}

// alreadyAssigned is kube-apiserver's answer to a Binding of a pod that has a node.
func alreadyAssigned(pod, node string) error {
	return apierrors.NewConflict(corev1.Resource("pods"), pod, fmt.Errorf("pod %s is already assigned to node %q", pod, node))
}

// BindLedger records the Bindings a counting fake client took (NewClientCountingBinds).
type BindLedger struct {
	mu    sync.Mutex
	nodes map[string]string // namespace/name → node
	order []Bind            // every Binding taken, in the order the apiserver took them
}

// Bind is one Binding a counting fake client took: the pod (namespace/name) and its node.
type Bind struct{ Pod, Node string }

// Binds is every Binding taken, in order (a copy): the cluster's state after the first k of
// them is what a scheduler saw when it placed the k+1st (up to the pods then in flight).
func (l *BindLedger) Binds() []Bind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Bind(nil), l.order...)
}

// record adds a Binding taken by a writing client (the tracker refused double bindings).
func (l *BindLedger) record(pod, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes[pod] = node
	l.order = append(l.order, Bind{Pod: pod, Node: node})
}

// Count is the number of pods bound.
func (l *BindLedger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.nodes)
}

// PerNode is the number of pods bound to each node.
func (l *BindLedger) PerNode() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	per := make(map[string]int, len(l.nodes))
	for _, n := range l.nodes {
		per[n]++
	}
	return per
}

// NewClientCountingBinds is NewClient whose Binding subresource only records the
// binding in the returned ledger (refusing a second binding of a pod with Conflict, as
// kube-apiserver does) and leaves the stored pod untouched: no object write, no watch event.
//
// Why: with the writing fake, every Binding is a tracker write that each informer of every
// shard receives and copies — ≈2.7 ms of CPU per bound pod here, which is the fake's cost, not
// the scheduler's, and made in-process runs past 20K nodes take half an hour. The schedulers keep
// bound pods as assumed pods in their caches (they never expire without FinishBinding), so
// their view of capacity stays exact; a real cluster's apiserver and its watch events are
// measured by `scheduler bench` instead.
func NewClientCountingBinds(objs ...runtime.Object) (*fake.Clientset, *BindLedger) {
	cs := fake.NewClientset(objs...)
	l := &BindLedger{nodes: map[string]string{}}
	onBinding(cs, func(ns string, b *corev1.Binding) error {
		k := ns + "/" + b.Name
		l.mu.Lock()
		defer l.mu.Unlock()
		if n, ok := l.nodes[k]; ok {
			return alreadyAssigned(b.Name, n)
		}
		l.nodes[k] = b.Target.Name
		l.order = append(l.order, Bind{Pod: k, Node: b.Target.Name})
		return nil
	})
	return cs, l
}

// Node is a Ready node with the given allocatable CPU (millicores), memory (MiB) and pods.
func Node(name string, milliCPU, memMiB, pods int64, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	l := map[string]string{"kubernetes.io/hostname": name, "type": "kwok"}
	for k, v := range labels {
		l[k] = v
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, UID: types.UID("node-" + name)},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// Nodes is n Nodes named prefix-0… of the given size, as objects for NewClient.
func Nodes(prefix string, n int, milliCPU, memMiB int64) []runtime.Object {
	objs := make([]runtime.Object, 0, n)
	for i := range n {
		objs = append(objs, Node(fmt.Sprintf("%s-%d", prefix, i), milliCPU, memMiB, 110, nil))
	}
	return objs
}

// Pod is a pending pod for schedulerName requesting milliCPU and memMiB.
func Pod(ns, name, schedulerName string, milliCPU, memMiB int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: corev1.PodSpec{SchedulerName: schedulerName, Containers: []corev1.Container{{Name: "app", Image: "pause",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI)}}}}},
	}
}
