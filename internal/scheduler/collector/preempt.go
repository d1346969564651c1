package collector

import (
	"math/rand/v2"
	"time"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The collector's part in preemption across shards (the whole story is in shard/preempt.go):
// when no shard has a feasible node, the globally cheapest of the shards' candidates wins.

// cheapestPreemption is the collector's choice when no shard has a feasible node: the live
// shard with the cheapest candidate (random tie-break), or -1 — also when any shard says the
// pod is still waiting for the victims of its earlier preemption, and when a live shard did not
// answer: it may have a free node (evicting is only right when nothing fits anywhere) or a
// cheaper candidate; the pod is retried instead.
func cheapestPreemption(got map[int]wire.Proposal, live []int) int {
	best, ties := -1, 0
	var bc wire.PreemptionCost
	for _, s := range live {
		p, ok := got[s]
		if !ok {
			return -1
		}
		if p.PreemptWait {
			return -1
		}
		if p.Preemption == nil {
			continue
		}
		switch c := p.Preemption.Cost.Compare(bc); {
		case best < 0 || c < 0:
			best, bc, ties = s, p.Preemption.Cost, 1
		case c == 0:
			ties++
			if rand.IntN(ties) == 0 {
				best = s
			}
		}
	}
	return best
}

// preemptRequeueDelay: how long after its preemption a pod is retried (victims on KWOK nodes
// are gone in well under this; slower ones make the retries back off as unschedulable).
const preemptRequeueDelay = 200 * time.Millisecond
