package shard

import "testing"

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
