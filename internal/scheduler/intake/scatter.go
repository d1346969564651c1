package intake

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The intake's half of the scatter policy (the collector's, and why, in collector/scatter.go):
// which pods go to every shard whatever --scatter says, and the node-constraint signature under
// which the collector learns how selective a pod's node constraints are.

// needsAllShards: the pod goes to every shard whatever --scatter says (see above).
func needsAllShards(p *corev1.Pod) bool {
	return podspec.HasCrossNodeConstraints(p) || p.Status.NominatedNodeName != ""
}

// nodeConstraintSig hashes what decides which nodes a pod may use at all: node selector,
// required node affinity, tolerations (0: none of them).
func nodeConstraintSig(p *corev1.Pod) uint64 {
	var req *corev1.NodeSelector
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		req = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if len(p.Spec.NodeSelector) == 0 && req == nil && len(p.Spec.Tolerations) == 0 {
		return 0
	}
	b, err := json.Marshal(struct {
		S map[string]string
		A *corev1.NodeSelector
		T []corev1.Toleration
	}{p.Spec.NodeSelector, req, p.Spec.Tolerations})
	if err != nil {
		return 1
	}
	return wire.Hash64(string(b)) | 1
}
