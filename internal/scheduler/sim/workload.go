package sim

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/scheduler/clusterbench"
	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
)

// Workloads of an in-process run (Config.Workload).
const (
	// WorkloadUniform is the reference's pods: every pod 100m CPU and 64Mi of one ReplicaSet
	// (runPod), on nodes of 8 CPU and 32 GiB (fakeapi.Nodes, `up`'s KWOK node).
	WorkloadUniform = clusterbench.WorkloadUniform
	// WorkloadMixed is `scheduler bench --workload mixed` (pods of 100m / 1 / 4 CPU, 70/20/10 %,
	// on nodes alternately of 8 CPU/32 GiB and 32 CPU/128 GiB: clusterbench's classes and sizes,
	// as `up` makes them: cluster.NodeObjectSized, three zones) plus what batching cannot hide:
	// 5 % of the pods in groups of 10 with a topology spread constraint (zone, maxSkew 1,
	// DoNotSchedule; even groups) or preferred pod anti-affinity (hostname, weight 100; odd
	// groups), and 0.1 % with a node selector for the large nodes (mixedPod).
	WorkloadMixed = clusterbench.WorkloadMixed
)

// mixed workload's shape.
const (
	mixedGroupSize = 10   // pods per constrained group (one ReplicaSet)
	mixedBlock     = 200  // in every block of 200 pods, one run of 10 consecutive pods is constrained: 5 %
	mixedSelectMod = 1000 // pod i with i mod 1000 = 500 has a node selector: 0.1 %
	largeInstance  = "m5.8xlarge"
	zoneKey        = "topology.kubernetes.io/zone"
)

// checkWorkload validates a workload name ("" is uniform).
func checkWorkload(w string) error {
	switch w {
	case "", WorkloadUniform, WorkloadMixed:
		return nil
	}
	return fmt.Errorf("workload: want %s or %s, got %q", WorkloadUniform, WorkloadMixed, w)
}

// workloadNode is node i of the workload.
func workloadNode(workload string, i int) *corev1.Node {
	name := fmt.Sprintf("sim-node-%d", i)
	if workload != WorkloadMixed {
		return fakeapi.Node(name, 8000, 32<<10, 110, nil)
	}
	n := cluster.NodeObjectSized(name, i, cluster.NodeSizeAt(clusterbench.WorkloadNodeSizes(workload), i))
	n.UID = types.UID("node-" + name)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// mixedConstrained says whether pod i of the mixed workload is in a constrained group, and which.
func mixedConstrained(i int) (group int, ok bool) {
	if (i/mixedGroupSize)%(mixedBlock/mixedGroupSize) != 7 {
		return 0, false
	}
	return i / mixedBlock, true
}

// workloadPod is pod i of the workload, as `create-pods` makes them (pending, for the default
// scheduler name).
func workloadPod(workload string, i int) *corev1.Pod {
	if workload != WorkloadMixed {
		return runPod(i)
	}
	name := fmt.Sprintf("sim-pod-%d", i)
	p := cluster.PodObject("sim", name, "sim")
	p.UID = types.UID("sim-" + name)
	p.Spec.SchedulerName = podspec.DefaultSchedulerName
	p.Spec.Containers[0].Resources.Requests = clusterbench.WorkloadRequests(workload, i)
	ctrl := true
	size := p.Spec.Containers[0].Resources.Requests.Cpu().String()
	owner := "mixed-" + size
	if g, ok := mixedConstrained(i); ok {
		owner = fmt.Sprintf("grp-%d", g)
		gl := strconv.Itoa(g)
		p.Labels["group"] = gl
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"group": gl}}
		if g%2 == 0 {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		} else {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: "kubernetes.io/hostname"}}}}}
		}
	} else {
		p.Labels["size"] = size
	}
	if i%mixedSelectMod == mixedSelectMod/2 {
		p.Spec.NodeSelector["node.kubernetes.io/instance-type"] = largeInstance
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner,
		UID: types.UID("sim-rs-" + owner), Controller: &ctrl}}
	return p
}

// podIndex is i of the pod named sim/sim-pod-i (a ledger key), or -1.
func podIndex(key string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(key, "sim/sim-pod-"))
	if err != nil || !strings.HasPrefix(key, "sim/sim-pod-") {
		return -1
	}
	return i
}

// workloadObjects are the run's nodes, and its pods when precreated, as objects for the fake.
//
// Uniform nodes and pods differ only in their names (and a node's hostname label): every node's
// capacity, allocatable and conditions, and every pod's labels, owner and container are one copy
// shared by all of them (equal values, as the informers and the scheduler only read them; a
// million-node run would otherwise hold a million equal maps of each).
func workloadObjects(workload string, nodes, pods int) []runtime.Object {
	objs := make([]runtime.Object, 0, nodes+pods)
	var n0 *corev1.Node
	for i := range nodes {
		n := workloadNode(workload, i)
		if workload != WorkloadMixed {
			if n0 == nil {
				n0 = n
			} else {
				n.Status.Capacity, n.Status.Allocatable, n.Status.Conditions = n0.Status.Capacity, n0.Status.Allocatable, n0.Status.Conditions
			}
		}
		objs = append(objs, n)
	}
	var p0 *corev1.Pod
	for i := range pods {
		p := workloadPod(workload, i)
		if workload != WorkloadMixed {
			if p0 == nil {
				p0 = p
			} else {
				p.Labels, p.OwnerReferences, p.Spec.Containers = p0.Labels, p0.OwnerReferences, p0.Spec.Containers
			}
		}
		objs = append(objs, p)
	}
	return objs
}
