package collector

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Scatter to d shards (power of d choices), not to all.
//
// With every shard evaluating every pod the system runs at one shard's rate whatever the shard
// count. Instead a collector sends each pod to d shards (--scatter N, default 2) and picks the
// best of their proposals: S shards then place ≈ S/d × one shard's rate. Which d: for each of
// the d places, two shards not chosen yet are drawn at random and the one with fewer attempts
// outstanding at this collector (sent, not yet answered) is taken — Mitzenmacher's power of
// two choices, which keeps the shards' queues within a small constant of each other instead of
// the log S / log log S spread of a purely random pick.
//
// Quality: a pod sees d shards' nodes, each shard walking its own nodes from where it stopped
// (FeasibleToFind), so over a run every node is visited as with one shard; placement spread
// is measured against kube-scheduler in `scheduler simulate` and `scheduler bench`.
//
// When a pod goes to every shard at once instead (the intake's needsAllShards, PickShards):
//   - pod affinity/anti-affinity or explicit topology spread: the global view evaluates them and
//     the intake serialises them per constraint group (shard/global_view.go, intake/groups.go);
//     their placement depends on which nodes are considered, so every shard must answer;
//   - a pod nominated by a preemption (status.nominatedNodeName): its room is on one node, held
//     by one shard;
//   - a pod retried after no shard could take it (podState.wide, and every later attempt):
//     preemption compares every shard's cheapest candidate, and a pod that once needed all
//     shards will likely need them again;
//   - a pod whose node constraints few shards satisfy. The intake cannot see nodes, so the
//     collector learns it: per node-constraint signature (node selector, required node
//     affinity, tolerations; the intake's nodeConstraintSig), an exponentially weighted
//     estimate f of the fraction of answering shards that had a feasible node. d sampled shards
//     all miss with probability (1-f)^d; when that exceeds ½ the pod goes to all shards at once
//     rather than paying a wasted round before widening. Pods without node constraints share
//     signature 0, which learns when the cluster fills up.
// A sampled attempt whose d shards have no feasible node is widened: the collector requeues it
// at once (no backoff, no FailedScheduling event) and the next attempt goes to every shard. The
// relay tree serves only those whole-cluster attempts.

// ScatterAll as a Scatter value sends every pod to every shard.
const ScatterAll = -1

// ParseScatter reads --scatter: "all" or a shard count d ≥ 1.
func ParseScatter(v string) (int, error) {
	if v == "all" {
		return ScatterAll, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("--scatter: want all or a shard count ≥ 1, got %q", v)
	}
	return n, nil
}

// selectivityAlpha weighs each new observation in the feasibility estimate.
const selectivityAlpha = 0.2

type scatterState struct {
	outstanding map[int]int        // shard → attempts sent and not answered (sampled attempts only)
	feasible    map[uint64]float64 // signature → estimated fraction of shards with a feasible node
	rng         *rand.Rand
}

func newScatterState() scatterState {
	return scatterState{outstanding: map[int]int{}, feasible: map[uint64]float64{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// learn folds a decided attempt's answers into its signature's feasibility estimate.
func (sc *scatterState) learn(a *attempt) {
	if len(a.got) == 0 || a.members != nil {
		return
	}
	n := 0
	for _, p := range a.got {
		if p.Feasible {
			n++
		}
	}
	obs := float64(n) / float64(len(a.got))
	if f, ok := sc.feasible[a.sig]; ok {
		sc.feasible[a.sig] = f + selectivityAlpha*(obs-f)
	} else {
		sc.feasible[a.sig] = obs
	}
	if len(sc.feasible) > 65536 {
		clear(sc.feasible) // bounded memory; estimates are relearnt
	}
}

// PickShards chooses the d shards an attempt with node-constraint signature sig goes to, or
// nil for every live shard (d ≥ live shards, or the signature is too selective).
func (c *Collector) PickShards(d int, sig uint64) []int {
	live := c.cfg.Live()
	if d <= 0 || d >= len(live) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.sc.feasible[sig]; ok && math.Pow(1-f, float64(d)) > 0.5 {
		c.m.Add("scatter_all_selective", 1)
		return nil
	}
	// Draws among the shards not chosen yet, by rejection: d is small against the shard count,
	// so this costs O(d²) per pod instead of copying the live list (O(S)) on the collector's path.
	out := make([]int, 0, d)
	draw := func(not int) int {
		for {
			s := live[c.sc.rng.IntN(len(live))]
			if s != not && !slices.Contains(out, s) {
				return s
			}
		}
	}
	for range d {
		a := draw(-1)
		if len(live)-len(out) > 1 {
			if b := draw(a); c.sc.outstanding[b] < c.sc.outstanding[a] {
				a = b
			}
		}
		out = append(out, a)
	}
	return out
}
