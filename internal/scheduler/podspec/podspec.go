// Package podspec classifies pods for more than one role: the spec fields a node-local verdict
// depends on (Signature: the shards' equivalence classes, the intake's batch classes), the
// controlling owner, whether a pod's placement depends on other nodes' pods (the shards' global
// view, the intake's constraint groups and scatter), whether it is terminal, and the scheduler
// name served by default. It depends on the Kubernetes API types only.
package podspec

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// DefaultSchedulerName is the spec.schedulerName meganode serves.
const DefaultSchedulerName = "meganode"

// Signature covers every pod field a default Filter plugin reads when the verdict depends
// only on the node: requests (containers, init containers, overhead, pod-level resources),
// host ports, node name/selector/affinity, tolerations, priority and scheduling gates.
func Signature(p *corev1.Pod) ([]byte, error) {
	type ctr struct {
		R     corev1.ResourceRequirements    `json:"r"`
		Ports []corev1.ContainerPort         `json:"p,omitempty"`
		Rp    *corev1.ContainerRestartPolicy `json:"rp,omitempty"`
	}
	var cs, ics []ctr
	for _, c := range p.Spec.Containers {
		cs = append(cs, ctr{R: c.Resources, Ports: c.Ports})
	}
	for _, c := range p.Spec.InitContainers {
		ics = append(ics, ctr{R: c.Resources, Ports: c.Ports, Rp: c.RestartPolicy})
	}
	var na *corev1.NodeAffinity
	if p.Spec.Affinity != nil {
		na = p.Spec.Affinity.NodeAffinity
	}
	return json.Marshal(struct {
		C, I  []ctr
		O     corev1.ResourceList
		PR    *corev1.ResourceRequirements
		NN    string
		NS    map[string]string
		NA    *corev1.NodeAffinity
		T     []corev1.Toleration
		Prio  *int32
		Gates []corev1.PodSchedulingGate
		OS    *corev1.PodOS
	}{cs, ics, p.Spec.Overhead, p.Spec.Resources, p.Spec.NodeName, p.Spec.NodeSelector, na, p.Spec.Tolerations, p.Spec.Priority,
		p.Spec.SchedulingGates, p.Spec.OS})
}

// OwnerOf is the pod's controlling owner (nil: none).
func OwnerOf(p *corev1.Pod) *corev1.ObjectReference {
	for _, r := range p.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return &corev1.ObjectReference{Kind: r.Kind, Name: r.Name, UID: r.UID}
		}
	}
	return nil
}

// HasCrossNodeConstraints: the pod's own spec makes its verdicts depend on other nodes' pods
// (required or preferred pod affinity/anti-affinity, explicit topology spread constraints). The
// default profile's system-default spread constraints (ScheduleAnyway, only for pods of a
// Service/ReplicaSet/StatefulSet/ReplicationController) are soft: they keep the shard view.
func HasCrossNodeConstraints(p *corev1.Pod) bool {
	if a := p.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		return true
	}
	return len(p.Spec.TopologySpreadConstraints) > 0
}

// Terminal: the pod has succeeded or failed (it holds no resources on its node any more).
func Terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
