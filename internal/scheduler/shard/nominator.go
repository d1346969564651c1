package shard

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/podspec"
)

// nominator is a shard's fwk.PodNominator: the pods nominated to a node by a preemption, which
// the framework's RunFilterPluginsWithNominatedPods counts as already running on that node for
// every pod of equal or lower priority. It keeps the room a preemption freed for the preemptor
// while its victims terminate: another pod (of this collector or another) cannot take it, since
// only the node's owner places pods there and the owner's Filter sees the nomination.
//
// kube-scheduler feeds its nominator from its scheduling queue; a shard has no queue, so it is
// fed from two places: the shard itself when it executes a preemption (at once, before the
// status update reaches any informer), and the pod informer (status.nominatedNodeName of
// unbound pods this scheduler serves — which also covers a restarted shard, a rebalance moving
// the node to another shard, and nominations made by another process's shard). Like
// kube-scheduler's, an update without status.nominatedNodeName keeps an in-memory nomination;
// a nomination ends when the pod is bound, deleted, terminal, or nominated elsewhere.
// Nominations of every node are kept (they are rare), so a rebalance needs nothing.
type nominator struct {
	mu       sync.RWMutex
	byNode   map[string]map[types.UID]fwk.PodInfo
	nodeOf   map[types.UID]string
	served   func(schedulerName string) bool
	onChange func() // nominations changed: verdicts cached without them are stale
}

var _ fwk.PodNominator = (*nominator)(nil)

func newNominator(served func(string) bool, onChange func()) *nominator {
	return &nominator{byNode: map[string]map[types.UID]fwk.PodInfo{}, nodeOf: map[types.UID]string{},
		served: served, onChange: onChange}
}

// nominate records pod as nominated to node (replacing any earlier nomination).
func (n *nominator) nominate(pod *corev1.Pod, node string) {
	pi, err := framework.NewPodInfo(pod)
	if err != nil || node == "" {
		return
	}
	n.mu.Lock()
	n.deleteLocked(pod.UID)
	m := n.byNode[node]
	if m == nil {
		m = map[types.UID]fwk.PodInfo{}
		n.byNode[node] = m
	}
	m[pod.UID] = pi
	n.nodeOf[pod.UID] = node
	n.mu.Unlock()
	if n.onChange != nil {
		n.onChange()
	}
}

// forget drops pod's nomination, if any.
func (n *nominator) forget(uid types.UID) {
	n.mu.Lock()
	had := n.deleteLocked(uid)
	n.mu.Unlock()
	if had && n.onChange != nil {
		n.onChange()
	}
}

func (n *nominator) deleteLocked(uid types.UID) bool {
	node, ok := n.nodeOf[uid]
	if !ok {
		return false
	}
	delete(n.nodeOf, uid)
	if m := n.byNode[node]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(n.byNode, node)
		}
	}
	return true
}

// nominatedNode is the node pod is nominated to ("" if none).
func (n *nominator) nominatedNode(uid types.UID) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.nodeOf[uid]
}

// lowerPriority lists the pods nominated to node with a priority below prio.
func (n *nominator) lowerPriority(node string, prio int32) []*corev1.Pod {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []*corev1.Pod
	for _, pi := range n.byNode[node] {
		if podPriority(pi.GetPod()) < prio {
			out = append(out, pi.GetPod())
		}
	}
	return out
}

// AddNominatedPod implements fwk.PodNominator (kube-scheduler's queue calls it; nothing in the
// framework a shard runs does, but the semantics are kept).
func (n *nominator) AddNominatedPod(_ klog.Logger, pi fwk.PodInfo, ni *fwk.NominatingInfo) {
	node := pi.GetPod().Status.NominatedNodeName
	if ni.Mode() == fwk.ModeOverride {
		node = ni.NominatedNodeName
	}
	if node == "" {
		n.forget(pi.GetPod().UID)
		return
	}
	n.nominate(pi.GetPod(), node)
}

// DeleteNominatedPodIfExists implements fwk.PodNominator.
func (n *nominator) DeleteNominatedPodIfExists(pod *corev1.Pod) { n.forget(pod.UID) }

// UpdateNominatedPod implements fwk.PodNominator: the new object keeps the old nomination
// unless it names another node.
func (n *nominator) UpdateNominatedPod(_ klog.Logger, old *corev1.Pod, pi fwk.PodInfo) {
	node := pi.GetPod().Status.NominatedNodeName
	if node == "" {
		node = n.nominatedNode(old.UID)
	}
	if node != "" {
		n.nominate(pi.GetPod(), node)
	}
}

// NominatedPodsForNode implements fwk.PodNominator.
func (n *nominator) NominatedPodsForNode(node string) []fwk.PodInfo {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.byNode[node]
	if len(m) == 0 {
		return nil
	}
	out := make([]fwk.PodInfo, 0, len(m))
	for _, pi := range m {
		out = append(out, pi)
	}
	return out
}

// handlers follow the pod informer (all pods, cluster-wide).
func (n *nominator) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.onPod(o) },
		UpdateFunc: func(_, o any) { n.onPod(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				n.forget(p.UID)
			}
		},
	}
}

func (n *nominator) onPod(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if p.Spec.NodeName != "" || podspec.Terminal(p) || p.DeletionTimestamp != nil || (n.served != nil && !n.served(p.Spec.SchedulerName)) {
		n.forget(p.UID)
		return
	}
	cur := n.nominatedNode(p.UID)
	switch node := p.Status.NominatedNodeName; {
	case node != "" && node != cur:
		n.nominate(p, node)
	case cur != "":
		// Same node (or an update that does not carry the nomination yet): refresh the object.
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			return
		}
		n.mu.Lock()
		if m := n.byNode[cur]; m != nil && n.nodeOf[p.UID] == cur {
			m[p.UID] = pi
		}
		n.mu.Unlock()
	}
}

// podPriority is spec.priority (0 when unset, as kube-scheduler reads it).
func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}
