package clusterbench

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/cluster"
)

func TestBenchWorkloadUniform(t *testing.T) {
	for _, w := range []string{"", WorkloadUniform} {
		for i := range 50 {
			p := benchPod(w, "ns", "p", "run", i)
			r := p.Spec.Containers[0].Resources.Requests
			if r.Cpu().MilliValue() != 100 || r.Memory().Value() != 64<<20 {
				t.Fatalf("workload %q pod %d: requests %v, want 100m/64Mi", w, i, r)
			}
			if p.Spec.SchedulerName != "" || p.Spec.NodeSelector["type"] != "kwok" {
				t.Fatalf("pod %d: schedulerName %q nodeSelector %v", i, p.Spec.SchedulerName, p.Spec.NodeSelector)
			}
		}
		if s := WorkloadNodeSizes(w); s != nil {
			t.Fatalf("workload %q: node sizes %v, want the default", w, s)
		}
	}
}

func TestBenchWorkloadMixedPods(t *testing.T) {
	count := map[int64]int{} // CPU milli → pods
	mem := map[int64]int64{}
	const n = 1000
	for i := range n {
		r := WorkloadRequests(WorkloadMixed, i)
		c := r.Cpu().MilliValue()
		count[c]++
		if m, ok := mem[c]; ok && m != r.Memory().Value() {
			t.Fatalf("pods of %dm CPU with memory %d and %d", c, m, r.Memory().Value())
		}
		mem[c] = r.Memory().Value()
	}
	want := map[int64]int{100: 700, 1000: 200, 4000: 100}
	wantMem := map[int64]int64{100: 64 << 20, 1000: 1 << 30, 4000: 4 << 30}
	for c, k := range want {
		if count[c] != k || mem[c] != wantMem[c] {
			t.Errorf("%dm CPU: %d pods of %d bytes, want %d of %d", c, count[c], mem[c], k, wantMem[c])
		}
	}
	if len(count) != 3 {
		t.Errorf("classes %v", count)
	}
	// Every stretch of 10 consecutive pods holds all three classes in the same proportions.
	for start := range 20 {
		c := map[int64]int{}
		for i := start; i < start+10; i++ {
			r := WorkloadRequests(WorkloadMixed, i)
			c[r.Cpu().MilliValue()]++
		}
		if c[100] != 7 || c[1000] != 2 || c[4000] != 1 {
			t.Fatalf("pods %d..%d: %v", start, start+9, c)
		}
	}
	if err := checkWorkload("bogus"); err == nil {
		t.Error("workload bogus accepted")
	}
}

func TestBenchWorkloadMixedNodes(t *testing.T) {
	sizes := WorkloadNodeSizes(WorkloadMixed)
	type shape struct {
		cpu, mem, pods int64
		it             string
	}
	count := map[shape]int{}
	const n = 200
	for i := range n {
		nd := cluster.NodeObjectSized("n", i, cluster.NodeSizeAt(sizes, i))
		a := nd.Status.Allocatable
		if !a.Cpu().Equal(nd.Status.Capacity[corev1.ResourceCPU]) {
			t.Fatalf("node %d: allocatable ≠ capacity", i)
		}
		count[shape{a.Cpu().Value(), a.Memory().Value(), a.Pods().Value(), nd.Labels["node.kubernetes.io/instance-type"]}]++
	}
	want := map[shape]int{{8, 32 << 30, 110, "m5.2xlarge"}: n / 2, {32, 128 << 30, 110, "m5.8xlarge"}: n / 2}
	if len(count) != len(want) {
		t.Fatalf("node shapes %v, want %v", count, want)
	}
	for s, k := range want {
		if count[s] != k {
			t.Errorf("shape %+v: %d nodes, want %d", s, count[s], k)
		}
	}
	// The default, for every other caller, is unchanged: 8 CPU, 32Gi, 110 pods, m5.2xlarge.
	for _, nd := range []*corev1.Node{cluster.NodeObject("d", 5), cluster.NodeObjectSized("d", 5, cluster.NodeSizeAt(nil, 5))} {
		a := nd.Status.Allocatable
		if a.Cpu().Value() != 8 || a.Memory().Value() != 32<<30 || a.Pods().Value() != 110 ||
			nd.Labels["node.kubernetes.io/instance-type"] != "m5.2xlarge" || nd.Labels["topology.kubernetes.io/zone"] != "zone-c" {
			t.Errorf("default node: %v %v", a, nd.Labels)
		}
	}
}

func TestBenchCheckCapacity(t *testing.T) {
	if err := checkCapacity(WorkloadMixed, 200, 400); err != nil {
		t.Error(err)
	}
	// 10 mixed pods request 6.7 CPU; one 8 CPU node takes 10 of them but not 20 (13.4 CPU).
	if err := checkCapacity(WorkloadMixed, 1, 10); err != nil {
		t.Error(err)
	}
	if err := checkCapacity(WorkloadMixed, 1, 20); err == nil {
		t.Error("20 mixed pods on one 8 CPU node accepted")
	}
	if err := checkCapacity(WorkloadUniform, 1, 80); err != nil { // 8 CPU
		t.Error(err)
	}
	if err := checkCapacity(WorkloadUniform, 1, 81); err == nil {
		t.Error("81 pods of 100m on 8 CPU accepted")
	}
	if err := checkCapacity(WorkloadUniform, 2, 111); err != nil {
		t.Error(err)
	}
}

func testNode(name, cpu, mem string, ready bool) corev1.Node {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
		corev1.ResourcePods: resource.MustParse("110")}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

func testPod(name, node, cpu, mem string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}}}
}

func TestBenchPlacementStats(t *testing.T) {
	nodes := []corev1.Node{testNode("a", "8", "32Gi", true), testNode("b", "8", "32Gi", true),
		testNode("c", "32", "128Gi", true), testNode("d", "8", "32Gi", true)}
	pods := []corev1.Pod{
		testPod("p1", "a", "1", "1Gi"), testPod("p2", "a", "1", "1Gi"), testPod("p3", "a", "2", "1Gi"), // a: 3 pods, 4 CPU = 0.5
		testPod("p4", "b", "100m", "64Mi"),                             // b: 1 pod, 0.0125
		testPod("p5", "c", "4", "4Gi"), testPod("p6", "c", "4", "4Gi"), // c: 2 pods, 8/32 = 0.25
		testPod("p7", "", "1", "1Gi"), // unscheduled
	}
	done := testPod("p8", "d", "4", "1Gi") // terminated: counts nowhere
	done.Status.Phase = corev1.PodSucceeded
	pods = append(pods, done)
	var row Row
	row.EmptyNodes = 99 // recomputed, not added to
	placementStats(nodes, pods, &row)

	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	us := []float64{0.5, 0.0125, 0.25, 0}
	um := (0.5 + 0.0125 + 0.25) / 4
	var uv float64
	for _, u := range us {
		uv += (u - um) * (u - um)
	}
	near("util mean", row.UtilMean, um)
	near("util sd", row.UtilStddev, math.Sqrt(uv/4))
	near("util max", row.UtilMax, 0.5)
	// pods per node 3, 1, 2, 0: mean 1.5, population variance (2.25+0.25+0.25+2.25)/4 = 1.25
	near("ppn mean", row.PodsPerNodeMean, 1.5)
	near("ppn sd", row.PodsPerNodeStddev, math.Sqrt(1.25))
	if row.PodsPerNodeMax != 3 || row.EmptyNodesByPods != 1 || row.EmptyNodes != 1 || row.Unscheduled != 1 {
		t.Errorf("ppn max %d, empty by pods %d, empty by CPU %d, unscheduled %d; want 3, 1, 1, 1",
			row.PodsPerNodeMax, row.EmptyNodesByPods, row.EmptyNodes, row.Unscheduled)
	}

	var none Row
	placementStats(nil, nil, &none)
	if none.UtilMean != 0 || none.PodsPerNodeStddev != 0 || math.IsNaN(none.UtilStddev) {
		t.Errorf("empty: %+v", none)
	}
}

func TestBenchAssignRoundRobin(t *testing.T) {
	nodes := []corev1.Node{testNode("c", "8", "32Gi", true), testNode("a", "8", "32Gi", true),
		testNode("b", "1", "32Gi", true), testNode("x", "64", "1Ti", false)}
	bound := []corev1.Pod{testPod("old", "a", "7500m", "1Gi")} // a has 500m left
	var pods []*corev1.Pod
	for i, cpu := range []string{"100m", "1", "100m", "1", "100m", "100m", "100m", "100m"} {
		p := testPod("n"+string(rune('0'+i)), "", cpu, "64Mi")
		pods = append(pods, &p)
	}
	got := assignRoundRobin(nodes, bound, pods)
	// Ready nodes in name order a (500m free), b (1 CPU), c (8 CPU); x is not Ready.
	// n0 100m → a (400m left); n1 1 CPU → b (none left); n2 100m → c; n3 1 CPU: a has 400m,
	// b none → c; n4 100m → a (300m); n5 100m: b is full → c; n6 → a; n7: b full → c.
	want := []string{"a", "b", "c", "c", "a", "c", "a", "c"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("assignments %v, want %v", got, want)
		}
	}
	if assignRoundRobin(nodes[3:], nil, pods) != nil {
		t.Error("no Ready node: want nil")
	}
	// Nothing fits: plain round-robin, never an empty target.
	big := testPod("big", "", "100", "1Gi")
	got = assignRoundRobin(nodes, nil, []*corev1.Pod{&big, &big, &big, &big})
	if got[0] != "a" || got[1] != "b" || got[2] != "c" || got[3] != "a" {
		t.Errorf("overflow assignments %v", got)
	}
}

// spent puts each process's CPU between two readings on it, scaled, and the machine's rest on
// "other".
func TestBenchSpentByProcess(t *testing.T) {
	before := map[string]float64{"kube-apiserver": 10, "store": 2}
	after := map[string]float64{"kube-apiserver": 13, "store": 2.5}
	got := spent(before, after, 4, 1e3/100) // 4 s of machine CPU over 100 pods
	want := map[string]float64{"kube-apiserver": 30, "store": 5, "other": 5}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-9 {
			t.Fatalf("%s: %v ms per pod, want %v (all: %v)", k, got[k], w, got)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
