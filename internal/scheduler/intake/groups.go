package intake

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Constraint groups: pods whose placement constrains each other (pod affinity/anti-affinity,
// topology spread) are scheduled one at a time per group by each collector's intake.
//
// Why: a shard's global view sees every bound pod and the pods it reserved itself, but not the
// reservations of other shards. Two pods of one spread group in flight together are each
// proposed by every shard against a view that misses the other's placement on another shard,
// so both may land in the same zone (skew 2) or two anti-affine replicas in the same domain.
// With one attempt per group in flight, the next pod of a group is sent only when the previous
// one is bound (or requeued) and its frame carries the latest placements (Header.Placed), so
// every shard evaluates it with the previous binding included even if its informer lags.
//
// Group: namespace + controlling owner UID (a ReplicaSet's replicas serialise, two Deployments
// proceed in parallel), or the namespace for pods without a controller. Limits: groups are per
// collector (with C collectors up to C pods of a group are in flight); pods of different groups
// whose constraints refer to each other, and unconstrained pods matching an existing pod's
// anti-affinity, are not serialised against each other (they still see every bound pod).

// placedWindow and placedMax bound the placements a frame carries.
const (
	placedWindow = 2 * time.Second
	placedMax    = 32
)

// constraintGroup is the group of a pod with cross-node constraints ("" = none).
func constraintGroup(p *corev1.Pod) string {
	if !podspec.HasCrossNodeConstraints(p) {
		return ""
	}
	if ref := podspec.OwnerOf(p); ref != nil {
		return p.Namespace + "/" + string(ref.UID)
	}
	return p.Namespace
}

type groupSlot struct {
	podKey string          // ns/name of the pod holding or about to take the slot
	key    wire.AttemptKey // the attempt in flight (zero while handed to a woken pod)
}

type placed struct {
	wire.Placement
	at time.Time
}

// groupGate keeps at most one attempt per constraint group in flight (nil: no serialisation).
type groupGate struct {
	wake    func(podKey string) // puts a parked pod back into the intake's queue
	mu      sync.Mutex
	slots   map[string]*groupSlot // group → holder
	byUID   map[string]string     // holder's pod UID → group
	waiting map[string][]string   // group → parked pod keys, FIFO
	parked  map[string]bool       // pod keys on a waiting list
	recent  []placed
}

func newGroupGate(wake func(string)) *groupGate {
	return &groupGate{wake: wake, slots: map[string]*groupSlot{}, byUID: map[string]string{}, waiting: map[string][]string{},
		parked: map[string]bool{}}
}

// acquire takes group's slot for the attempt (true), or parks podKey until the slot is free.
func (g *groupGate) acquire(group, podKey string, key wire.AttemptKey) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.passOtherLocked(podKey, group)
	if group == "" {
		return true
	}
	sl := g.slots[group]
	switch {
	case sl == nil:
		g.slots[group] = &groupSlot{podKey: podKey, key: key}
	case sl.podKey == podKey && sl.key == (wire.AttemptKey{}):
		sl.key = key // woken: the slot was handed to this pod
	default:
		if !g.parked[podKey] {
			g.parked[podKey] = true
			g.waiting[group] = append(g.waiting[group], podKey)
		}
		return false
	}
	g.byUID[key.UID] = group
	return true
}

// passOtherLocked: a pod handed the slot of a group it no longer belongs to passes it on.
func (g *groupGate) passOtherLocked(podKey, group string) {
	for gr, sl := range g.slots {
		if gr != group && sl.podKey == podKey && sl.key == (wire.AttemptKey{}) {
			g.handOnLocked(gr)
		}
	}
}

// handOnLocked frees group's slot, handing it to the first parked pod.
func (g *groupGate) handOnLocked(group string) {
	delete(g.slots, group)
	q := g.waiting[group]
	if len(q) == 0 {
		delete(g.waiting, group)
		return
	}
	next := q[0]
	if len(q) == 1 {
		delete(g.waiting, group)
	} else {
		g.waiting[group] = q[1:]
	}
	delete(g.parked, next)
	g.slots[group] = &groupSlot{podKey: next}
	g.wake(next)
}

// release ends an attempt (requeued or finished); bound pods are remembered as placements.
func (g *groupGate) release(key wire.AttemptKey, p *wire.Placement) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	group, ok := g.byUID[key.UID]
	if !ok {
		return
	}
	sl := g.slots[group]
	if sl == nil || sl.key != key {
		return
	}
	delete(g.byUID, key.UID)
	if p != nil {
		p.Namespace, p.Name, _ = strings.Cut(sl.podKey, "/")
		g.recent = append(g.recent, placed{Placement: *p, at: time.Now()})
		if len(g.recent) > placedMax {
			g.recent = g.recent[len(g.recent)-placedMax:]
		}
	}
	g.handOnLocked(group)
}

// drop: podKey will not take a slot handed to it (deleted, bound meanwhile): pass it on.
func (g *groupGate) drop(podKey string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.passOtherLocked(podKey, "")
}

// placements are the recent placements a constrained pod's frame carries.
func (g *groupGate) placements() []wire.Placement {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	cut := time.Now().Add(-placedWindow)
	var out []wire.Placement
	for _, p := range g.recent {
		if p.at.After(cut) {
			out = append(out, p.Placement)
		}
	}
	return out
}
