package shard

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// FeasibleLimit with FeasibleAuto is kube-scheduler's numFeasibleNodesToFind with the default
// percentageOfNodesToScore, over the shard's node count.
func TestFeasibleLimitAuto(t *testing.T) {
	for _, c := range []struct{ nodes, want int }{
		{50, 0},        // under 100: every node
		{100, 100},     // 49% of 100 = 49, raised to the 100 minimum
		{1000, 420},    // 50 − 8 = 42%
		{2500, 750},    // 50 − 20 = 30%
		{5000, 500},    // 50 − 40 = 10%
		{10000, 500},   // 50 − 80 < 5: 5%
		{100000, 5000}, // 5%
	} {
		if got := FeasibleLimit(FeasibleAuto, c.nodes); got != c.want {
			t.Errorf("auto over %d nodes: %d, want %d", c.nodes, got, c.want)
		}
	}
	if got := FeasibleLimit(0, 10000); got != 0 {
		t.Errorf("all: %d, want 0", got)
	}
	if got := FeasibleLimit(250, 10000); got != 250 {
		t.Errorf("fixed: %d, want 250", got)
	}
	for _, v := range []string{"-1", "x", ""} {
		if _, err := ParseFeasibleToFind(v); err == nil {
			t.Errorf("ParseFeasibleToFind(%q): no error", v)
		}
	}
	for v, want := range map[string]int{"auto": FeasibleAuto, "all": 0, "0": 0, "300": 300} {
		if got, err := ParseFeasibleToFind(v); err != nil || got != want {
			t.Errorf("ParseFeasibleToFind(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
}

// bestOf: the highest total wins; among equal totals the node holding the fewest pods, then one
// of those at random (each of them, over many draws).
func TestBestOfPrefersFewerPods(t *testing.T) {
	node := func(name string, pods int) fwk.NodeInfo {
		var ps []*corev1.Pod
		for i := range pods {
			ps = append(ps, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("%s-%d", name, i))}})
		}
		ni := framework.NewNodeInfo(ps...)
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		return ni
	}
	nodes := []fwk.NodeInfo{node("a", 1), node("b", 0), node("c", 2), node("d", 0), node("e", 0)}
	scores := []fwk.NodePluginScores{{Name: "a", TotalScore: 100}, {Name: "b", TotalScore: 100}, {Name: "c", TotalScore: 100},
		{Name: "d", TotalScore: 100}, {Name: "e", TotalScore: 99}}
	seen := map[string]int{}
	for range 400 {
		seen[scores[bestOf(scores, nodes)].Name]++
	}
	if seen["a"]+seen["c"]+seen["e"] != 0 || seen["b"] == 0 || seen["d"] == 0 {
		t.Fatalf("want b and d (100, no pods), each sometimes: %v", seen)
	}
	// A higher total wins over fewer pods.
	scores[2].TotalScore = 101
	if got := scores[bestOf(scores, nodes)].Name; got != "c" {
		t.Fatalf("want c (the highest total), got %s", got)
	}
	// Nodes not lined up with the scores count as holding none.
	if got := scores[bestOf(scores[:2], nil)].Name; got != "a" && got != "b" {
		t.Fatalf("got %s", got)
	}
}
