// Package fakeapi is the apiserver the scheduler's tests and its in-process simulator run
// against: client-go's fake clientset with a Binding subresource that behaves like
// kube-apiserver's (or only counts Bindings), and ready-made nodes and pods. Tests of several
// role packages and the simulator use it, so it is a package of its own.
package fakeapi

import (
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
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
	l := newBindLedger()
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
// Compact, as it holds one entry per pod of a million-pod run: each pod's key once, shared by
// the index and the order, and its node as an index into the node names (each name once).
type BindLedger struct {
	mu     sync.Mutex
	at     map[string]int32 // namespace/name → its entry in order
	nodeAt map[string]int32 // node name → its index in names
	names  []string
	order  []ledgerBind // every Binding taken, in the order the apiserver took them
}

type ledgerBind struct {
	pod  string
	node int32
}

func newBindLedger() *BindLedger {
	return &BindLedger{at: map[string]int32{}, nodeAt: map[string]int32{}}
}

// Bind is one Binding a counting fake client took: the pod (namespace/name) and its node.
type Bind struct{ Pod, Node string }

// Binds is every Binding taken, in order (a copy): the cluster's state after the first k of
// them is what a scheduler saw when it placed the k+1st (up to the pods then in flight).
func (l *BindLedger) Binds() []Bind {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Bind, len(l.order))
	for i, b := range l.order {
		out[i] = Bind{Pod: b.pod, Node: l.names[b.node]}
	}
	return out
}

// nodeOfLocked is the node pod was bound to (l.mu held).
func (l *BindLedger) nodeOfLocked(pod string) (string, bool) {
	i, ok := l.at[pod]
	if !ok {
		return "", false
	}
	return l.names[l.order[i].node], true
}

// addLocked records pod bound to node (l.mu held). A pod recorded again is listed again in
// the order and its node is the newest entry's.
func (l *BindLedger) addLocked(pod, node string) {
	n, ok := l.nodeAt[node]
	if !ok {
		n = int32(len(l.names))
		l.names = append(l.names, node)
		l.nodeAt[node] = n
	}
	if i, ok := l.at[pod]; ok {
		pod = l.order[i].pod // one copy of the key
	}
	l.at[pod] = int32(len(l.order))
	l.order = append(l.order, ledgerBind{pod: pod, node: n})
}

// record adds a Binding taken by a writing client (the tracker refused double bindings).
func (l *BindLedger) record(pod, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(pod, node)
}

// Count is the number of pods bound.
func (l *BindLedger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

// PerNode is the number of pods bound to each node.
func (l *BindLedger) PerNode() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	per := make(map[string]int, len(l.names))
	for _, i := range l.at {
		per[l.names[l.order[i].node]]++
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
	l := newBindLedger()
	onBinding(cs, func(ns string, b *corev1.Binding) error {
		k := ns + "/" + b.Name
		l.mu.Lock()
		defer l.mu.Unlock()
		if n, ok := l.nodeOfLocked(k); ok {
			return alreadyAssigned(b.Name, n)
		}
		l.addLocked(k, b.Target.Name)
		return nil
	})
	return cs, l
}

// NewClientCountingBindsLean is NewClientCountingBinds for a cluster whose nodes and pods all
// exist before the client is used and are never written afterwards (the simulator's runs with
// pods created ahead): the Node and Pod objects are not put in the object tracker but kept once
// here, and LISTs of nodes and pods return them without the tracker's deep copy (GETs return a
// copy, as the tracker does). The informers' stores then share every object's maps, slices and
// strings with this one copy instead of holding a second deep copy of a tracker that holds a
// first one (measured: half of `scheduler million`'s live heap was the tracker and the listed
// copies). Once the informers have listed them, Lean.ServeFrom hands the objects over to an
// informer's store and this copy is dropped. Bindings are counted exactly as
// NewClientCountingBinds counts them. Objects of other kinds go to the tracker as before.
// Callers must not modify what a LIST returns (informers do not); a pod or node created later
// through the client is in the tracker only, which these LISTs do not see — so use it only when
// everything is created ahead.
func NewClientCountingBindsLean(objs ...runtime.Object) (*fake.Clientset, *BindLedger, *Lean) {
	var rest []runtime.Object
	ln := &Lean{}
	for _, o := range objs {
		switch t := o.(type) {
		case *corev1.Node:
			ln.nodes = append(ln.nodes, *t)
		case *corev1.Pod:
			ln.pods = append(ln.pods, *t)
		default:
			rest = append(rest, o)
		}
	}
	ln.nodes, ln.pods = slices.Clip(ln.nodes), slices.Clip(ln.pods)
	ln.nodeAt = make(map[string]int, len(ln.nodes))
	for i := range ln.nodes {
		ln.nodeAt[ln.nodes[i].Name] = i
	}
	ln.podAt = make(map[string]int, len(ln.pods))
	for i := range ln.pods {
		ln.podAt[ln.pods[i].Namespace+"/"+ln.pods[i].Name] = i
	}
	cs, l := NewClientCountingBinds(rest...)
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return ln.listNodes()
	})
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return ln.listPods(a.GetNamespace())
	})
	cs.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return ln.getNode(a.(k8stesting.GetAction).GetName())
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return ln.getPod(a.GetNamespace(), a.(k8stesting.GetAction).GetName())
	})
	return cs, l, ln
}

// Lean holds the nodes and pods of a NewClientCountingBindsLean client: its own copy until
// ServeFrom, then an informer's store.
type Lean struct {
	mu            sync.RWMutex
	nodes         []corev1.Node
	pods          []corev1.Pod
	nodeAt, podAt map[string]int
	nodeLister    corelisters.NodeLister // after ServeFrom
	podLister     corelisters.PodLister
}

var leanListMeta = metav1.ListMeta{ResourceVersion: "1"}

// ServeFrom makes the client answer LISTs and GETs of nodes and pods from these listers (an
// informer factory's, synced: it holds the same objects, which nobody writes) and drops the
// client's own copy.
func (ln *Lean) ServeFrom(nodes corelisters.NodeLister, pods corelisters.PodLister) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.nodeLister, ln.podLister = nodes, pods
	ln.nodes, ln.pods, ln.nodeAt, ln.podAt = nil, nil, nil, nil
}

func (ln *Lean) listNodes() (bool, runtime.Object, error) {
	ln.mu.RLock()
	defer ln.mu.RUnlock()
	if ln.nodeLister == nil {
		return true, &corev1.NodeList{ListMeta: leanListMeta, Items: ln.nodes}, nil
	}
	ns, err := ln.nodeLister.List(labels.Everything())
	if err != nil {
		return true, nil, err
	}
	out := &corev1.NodeList{ListMeta: leanListMeta, Items: make([]corev1.Node, 0, len(ns))}
	for _, n := range ns {
		out.Items = append(out.Items, *n)
	}
	return true, out, nil
}

func (ln *Lean) listPods(ns string) (bool, runtime.Object, error) {
	ln.mu.RLock()
	defer ln.mu.RUnlock()
	if ln.podLister == nil {
		if ns == "" {
			return true, &corev1.PodList{ListMeta: leanListMeta, Items: ln.pods}, nil
		}
		out := &corev1.PodList{ListMeta: leanListMeta}
		for i := range ln.pods {
			if ln.pods[i].Namespace == ns {
				out.Items = append(out.Items, ln.pods[i])
			}
		}
		return true, out, nil
	}
	var ps []*corev1.Pod
	var err error
	if ns == "" {
		ps, err = ln.podLister.List(labels.Everything())
	} else {
		ps, err = ln.podLister.Pods(ns).List(labels.Everything())
	}
	if err != nil {
		return true, nil, err
	}
	out := &corev1.PodList{ListMeta: leanListMeta, Items: make([]corev1.Pod, 0, len(ps))}
	for _, p := range ps {
		out.Items = append(out.Items, *p)
	}
	return true, out, nil
}

func (ln *Lean) getNode(name string) (bool, runtime.Object, error) {
	ln.mu.RLock()
	defer ln.mu.RUnlock()
	if ln.nodeLister != nil {
		n, err := ln.nodeLister.Get(name)
		if err != nil {
			return true, nil, err
		}
		return true, n.DeepCopy(), nil
	}
	i, ok := ln.nodeAt[name]
	if !ok {
		return true, nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return true, ln.nodes[i].DeepCopy(), nil
}

func (ln *Lean) getPod(ns, name string) (bool, runtime.Object, error) {
	ln.mu.RLock()
	defer ln.mu.RUnlock()
	if ln.podLister != nil {
		p, err := ln.podLister.Pods(ns).Get(name)
		if err != nil {
			return true, nil, err
		}
		return true, p.DeepCopy(), nil
	}
	i, ok := ln.podAt[ns+"/"+name]
	if !ok {
		return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return true, ln.pods[i].DeepCopy(), nil
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
