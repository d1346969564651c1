package wire

import (
	"fmt"
	"math"
	"testing"
)

func TestHashStable(t *testing.T) {
	// FNV-1a 64 of "kwok-node-0": fixed forever, so every process agrees on ownership.
	if got, want := Hash64("kwok-node-0"), Hash64("kwok-node-0"); got != want {
		t.Fatal("unstable")
	}
	if Hash64("") != 0xcbf29ce484222325 {
		t.Fatalf("FNV-1a offset basis changed: %x", Hash64(""))
	}
	if a, b := CollectorOf("ns", "p", 7), CollectorOf("ns", "p", 7); a != b || a < 0 || a >= 7 {
		t.Fatalf("CollectorOf: %d %d", a, b)
	}
}

func TestJumpHashMinimalMove(t *testing.T) {
	const keys = 20000
	for _, n := range []int{1, 2, 3, 8, 255} {
		moved := 0
		for i := range keys {
			h := Hash64(fmt.Sprintf("node-%d", i))
			a, b := JumpHash(h, n), JumpHash(h, n+1)
			if a != b {
				moved++
				if b != n {
					t.Fatalf("key moved from %d to %d, not to the new bucket %d", a, b, n)
				}
			}
		}
		want := float64(keys) / float64(n+1)
		if math.Abs(float64(moved)-want) > 0.15*want+30 {
			t.Errorf("%d→%d buckets: %d keys moved, want ≈%.0f", n, n+1, moved, want)
		}
	}
}

func TestRendezvousBalanceAndRebalance(t *testing.T) {
	const nodes, shards = 20000, 8
	live := AllShards(shards)
	count := make([]int, shards)
	owner := make([]int, nodes)
	for i := range nodes {
		owner[i] = Owner(fmt.Sprintf("kwok-node-%d", i), live)
		count[owner[i]]++
	}
	for s, c := range count {
		if exp := nodes / shards; math.Abs(float64(c-exp)) > 0.1*float64(exp) {
			t.Errorf("shard %d owns %d nodes, want ≈%d", s, c, exp)
		}
	}
	// Shard 3 dies: only its nodes move, spread over the survivors.
	survivors := []int{0, 1, 2, 4, 5, 6, 7}
	gained := map[int]int{}
	for i := range nodes {
		o := Owner(fmt.Sprintf("kwok-node-%d", i), survivors)
		if owner[i] != 3 && o != owner[i] {
			t.Fatalf("node %d moved from live shard %d to %d", i, owner[i], o)
		}
		if owner[i] == 3 {
			if o == 3 {
				t.Fatal("dead shard still owns a node")
			}
			gained[o]++
		}
	}
	for _, s := range survivors {
		if exp := count[3] / len(survivors); math.Abs(float64(gained[s]-exp)) > 0.3*float64(exp) {
			t.Errorf("survivor %d took %d of shard 3's nodes, want ≈%d", s, gained[s], exp)
		}
	}
	// It comes back: exactly its old nodes return.
	for i := range nodes {
		if Owner(fmt.Sprintf("kwok-node-%d", i), live) != owner[i] {
			t.Fatal("ownership not restored")
		}
	}
}
