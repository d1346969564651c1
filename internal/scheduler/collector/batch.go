package collector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// decideBatch is decide for a batch (c.mu held; releases it). The shards' slot lists are
// merged best next slot first: member i goes to the shard whose next unassigned slot has the
// highest score (ties at random), so each shard gets a prefix of its slots — the only subsets
// whose reservations it made in order. Members left without a slot are requeued one by one:
// widened when the attempt was sampled, unschedulable (with backoff) when every shard answered.
func (c *Collector) decideBatch(ctx context.Context, a *attempt, now time.Time, live []int) {
	next := map[int]int{}
	assign := map[int][]int{}
	member := 0
	for ; member < len(a.members); member++ {
		// The best next slot of any shard: the highest score, then the emptier node, then at random.
		best, ties := -1, 0
		var bestScore int64
		var bestPods int
		for s, p := range a.got {
			i := next[s]
			if !p.Feasible || i >= len(p.Slots) {
				continue
			}
			sc, pods := p.Slots[i].Score, p.Slots[i].Pods
			switch {
			case best < 0 || sc > bestScore || sc == bestScore && pods < bestPods:
				best, bestScore, bestPods, ties = s, sc, pods, 1
			case sc == bestScore && pods == bestPods:
				ties++
				if rand.IntN(ties) == 0 {
					best = s
				}
			}
		}
		if best < 0 {
			break
		}
		assign[best] = append(assign[best], member)
		next[best]++
	}
	for s := range assign {
		for _, mi := range assign[s] {
			key := a.members[mi]
			c.commits[key] = time.AfterFunc(c.cfg.CommitTimeout, func() { c.commitTimeout(key) })
		}
	}
	if !a.first.IsZero() {
		c.m.Observe("gather", now.Sub(a.first))
	}
	c.m.Add("decided", 1)
	c.m.Add("batch_decided", 1)
	c.m.Add("batch_assigned", int64(member))
	sampled := a.targets != nil && len(a.targets) < len(live)
	c.mu.Unlock()
	if c.cfg.Decided != nil {
		c.cfg.Decided(a.key)
	}
	for s, p := range a.got {
		if !p.Feasible {
			continue
		}
		d := wire.Decision{Key: a.key, Allow: len(assign[s]) > 0, Collector: c.cfg.Index, Assign: assign[s]}
		if err := c.send(context.WithoutCancel(ctx), s, d); err != nil && d.Allow {
			for _, mi := range assign[s] {
				key := a.members[mi]
				c.mu.Lock()
				if t, ok := c.commits[key]; ok {
					t.Stop()
					delete(c.commits, key)
				}
				c.mu.Unlock()
				c.requeue(key, 0, "winner unreachable: "+err.Error())
			}
		}
	}
	if member == len(a.members) {
		return
	}
	why := "no shard has a feasible node"
	for _, p := range a.got {
		if p.Reason != "" {
			why = p.Reason
			break
		}
	}
	for _, key := range a.members[member:] {
		if sampled {
			c.m.Add("widened", 1)
			c.requeue(key, 0, fmt.Sprintf("widen: the %d sampled shards had no room for this batch member", len(a.targets)))
			continue
		}
		c.m.Add("unschedulable", 1)
		delay := min(100*time.Millisecond<<min(a.unsched, 6), 5*time.Second)
		c.requeue(key, delay, "unschedulable: "+why)
	}
}
