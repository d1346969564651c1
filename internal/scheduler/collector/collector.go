package collector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Config configures one collector.
type Config struct {
	Index    int
	Shards   map[int]wire.DecisionSink // by shard id
	Live     func() []int              // current live shard ids
	Fraction float64                   // decide once this fraction of live shards answered (default 1)
	Deadline time.Duration             // …or this long after the first answer (default 250ms)
	// HardDeadline: with no feasible answer yet, wait this long after the first answer for the
	// rest (default 4×Deadline).
	HardDeadline time.Duration
	// NoAnswerTimeout: an attempt no shard has answered this long after it was sent is requeued
	// (lost frames, every shard down). Long, because under a backlog frames wait in the shards'
	// queues; a short one would requeue work the shards are about to do (default 30s).
	NoAnswerTimeout time.Duration
	CommitTimeout   time.Duration // winner must report its bind within this (default 30s)
	// AwaitAfterMisses: a shard that missed this many decisions in a row is waited for (up to
	// HardDeadline) on the next attempts, so a slow shard is never starved (default 3).
	AwaitAfterMisses int
	// DeadAfter: a live shard silent this long while others answer is reported dead (0: never).
	DeadAfter   time.Duration
	OnShardDead func(shard int)
	Requeue     func(key wire.AttemptKey, delay time.Duration, why string) // intake retries with Attempt+1
	Finished    func(key wire.AttemptKey, node string, bound bool)         // bound, or gone
	Decided     func(key wire.AttemptKey)                                  // the attempt left the gather stage (frees an in-flight slot)
}

type attempt struct {
	key       wire.AttemptKey
	targets   []int             // the shards the frame went to (nil: every live shard)
	members   []wire.AttemptKey // a batch's pods (nil: one pod, key)
	sig       uint64            // node-constraint signature (intake/scatter.go): feasibility estimate
	expected  time.Time
	first     time.Time
	got       map[int]wire.Proposal
	decided   bool
	feasible  bool
	timer     *time.Timer
	hardTimer *time.Timer
	unsched   int // unschedulable rounds so far (for backoff), carried by intake through Expect
}

// Collector gathers the shards' proposals for the pods that hash to it, decides, and follows
// each winner's bind to its end.
type Collector struct {
	cfg      Config
	mu       sync.Mutex
	pending  map[wire.AttemptKey]*attempt
	decided  map[wire.AttemptKey]time.Time // recently decided: late answers are counted, not acted on
	commits  map[wire.AttemptKey]*time.Timer
	misses   map[int]int
	awaited  map[int]bool // shards with misses ≥ AwaitAfterMisses
	heard    map[int]time.Time
	lastDone time.Time
	m        *metrics.Counters
	sc       scatterState // d-sampling: outstanding work per shard, feasibility by signature (scatter.go)
}

// New makes a collector.
func New(cfg Config) *Collector {
	if cfg.Fraction <= 0 || cfg.Fraction > 1 {
		cfg.Fraction = 1
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 250 * time.Millisecond
	}
	if cfg.HardDeadline <= 0 {
		cfg.HardDeadline = 4 * cfg.Deadline
	}
	if cfg.NoAnswerTimeout <= 0 {
		cfg.NoAnswerTimeout = 30 * time.Second
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 30 * time.Second
	}
	if cfg.AwaitAfterMisses <= 0 {
		cfg.AwaitAfterMisses = 3
	}
	c := &Collector{cfg: cfg, pending: map[wire.AttemptKey]*attempt{}, decided: map[wire.AttemptKey]time.Time{},
		commits: map[wire.AttemptKey]*time.Timer{}, misses: map[int]int{}, awaited: map[int]bool{}, heard: map[int]time.Time{},
		m: metrics.For(fmt.Sprintf("collector/%d", cfg.Index)), sc: newScatterState()}
	// What deploy/grafana/meganode.json plots, on /metrics from the start.
	c.m.Declare([]string{"bound", "conflicts", "late_proposals", "unknown_proposals", "unschedulable", "decided"},
		[]string{"proposal_latency", "gather"})
	return c
}

// Expect registers an attempt sent to every live shard (see ExpectScatter).
func (c *Collector) Expect(key wire.AttemptKey, unsched int) {
	c.ExpectScatter(Expectation{Key: key, Unsched: unsched})
}

// Expectation describes an attempt about to be scattered.
type Expectation struct {
	Key     wire.AttemptKey
	Unsched int               // unschedulable rounds so far (backoff)
	Targets []int             // shards the frame goes to (nil: every live shard)
	Members []wire.AttemptKey // a batch's pods (nil: a single pod)
	Sig     uint64            // node-constraint signature (intake/scatter.go)
}

// ExpectScatter registers an attempt before its frame is scattered, so that an attempt no
// shard answers (frames lost, all shards down) still times out and is requeued.
func (c *Collector) ExpectScatter(e Expectation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &attempt{key: e.Key, expected: time.Now(), got: map[int]wire.Proposal{}, unsched: e.Unsched, targets: e.Targets,
		members: e.Members, sig: e.Sig}
	a.hardTimer = time.AfterFunc(c.cfg.NoAnswerTimeout, func() { c.timeout(e.Key, true) })
	c.pending[e.Key] = a
	for _, t := range e.Targets {
		c.sc.outstanding[t]++
	}
	c.m.Add("expected", 1)
}

// Propose implements ProposalSink.
func (c *Collector) Propose(ctx context.Context, p wire.Proposal) error {
	c.mu.Lock()
	now := time.Now()
	c.heard[p.Shard] = now
	a, ok := c.pending[p.Key]
	if !ok || a.decided {
		_, wasDecided := c.decided[p.Key]
		c.mu.Unlock()
		if wasDecided {
			metrics.For(fmt.Sprintf("shard/%d", p.Shard)).Add("late", 1)
			c.m.Add("late_proposals", 1)
		} else {
			c.m.Add("unknown_proposals", 1)
		}
		if p.Feasible || p.Preemption != nil {
			c.send(ctx, p.Shard, wire.Decision{Key: p.Key, Allow: false, Collector: c.cfg.Index})
		}
		return nil
	}
	if a.first.IsZero() {
		a.first = now
		a.timer = time.AfterFunc(c.cfg.Deadline, func() { c.timeout(p.Key, false) })
		// From the first answer on, the hard deadline bounds the wait for the rest.
		a.hardTimer.Reset(c.cfg.HardDeadline)
	}
	if _, dup := a.got[p.Shard]; !dup && a.targets != nil && a.targeted(p.Shard) {
		c.sc.outstanding[p.Shard]--
	}
	if _, dup := a.got[p.Shard]; !dup {
		// Proposal latency: the attempt registered (just before its scatter) to this shard's answer here.
		c.m.Observe("proposal_latency", now.Sub(a.expected))
	}
	a.got[p.Shard] = p
	a.feasible = a.feasible || p.Feasible
	if c.ready(a, false) {
		c.decide(ctx, a) // unlocks
		return nil
	}
	c.mu.Unlock()
	return nil
}

// ready: every live shard answered; or the fraction answered, every awaited straggler too and
// at least one answer is feasible. On the deadline: any feasible answer (stragglers included
// only if awaited), else wait for the hard deadline. O(awaited) per call, not O(shards).
func (c *Collector) ready(a *attempt, deadline bool) bool {
	nLive := len(c.cfg.Live())
	if a.targets != nil {
		nLive = len(a.targets)
	}
	answered := len(a.got)
	if answered >= nLive {
		return true
	}
	for s := range c.awaited {
		if _, ok := a.got[s]; !ok && a.targeted(s) {
			return false
		}
	}
	if deadline {
		return a.feasible
	}
	need := int(math.Ceil(c.cfg.Fraction * float64(nLive)))
	return a.feasible && answered >= need
}

// targeted: shard s was sent this attempt's frame.
func (a *attempt) targeted(s int) bool {
	return a.targets == nil || slices.Contains(a.targets, s)
}

func (c *Collector) timeout(key wire.AttemptKey, hard bool) {
	c.mu.Lock()
	a, ok := c.pending[key]
	if !ok || a.decided {
		c.mu.Unlock()
		return
	}
	if hard || c.ready(a, true) {
		c.decide(context.Background(), a)
		return
	}
	c.mu.Unlock()
}

// decide is called with c.mu held and releases it.
func (c *Collector) decide(ctx context.Context, a *attempt) {
	a.decided = true
	delete(c.pending, a.key)
	if a.timer != nil {
		a.timer.Stop()
	}
	a.hardTimer.Stop()
	now := time.Now()
	c.decided[a.key] = now
	if len(c.decided) > 100000 {
		for k, t := range c.decided {
			if now.Sub(t) > time.Minute {
				delete(c.decided, k)
			}
		}
	}
	live := c.cfg.Live()
	c.sc.learn(a)
	for _, s := range a.targets {
		if _, ok := a.got[s]; !ok {
			c.sc.outstanding[s]--
		}
	}
	for _, s := range live {
		if !a.targeted(s) {
			continue
		}
		if _, ok := a.got[s]; ok {
			if c.misses[s] != 0 {
				c.misses[s] = 0
				delete(c.awaited, s)
			}
		} else {
			c.misses[s]++
			if c.misses[s] >= c.cfg.AwaitAfterMisses {
				c.awaited[s] = true
			}
			metrics.For(fmt.Sprintf("shard/%d", s)).Add("missed_decisions", 1)
		}
	}
	winner, ties := -1, 0
	var best wire.Proposal
	for _, s := range live {
		p, ok := a.got[s]
		if !ok || !p.Feasible {
			continue
		}
		switch {
		case winner < 0 || p.Score > best.Score || p.Score == best.Score && p.Pods < best.Pods:
			winner, best, ties = s, p, 1
		case p.Score == best.Score && p.Pods == best.Pods:
			ties++
			if rand.IntN(ties) == 0 {
				winner, best = s, p
			}
		}
	}
	if a.members != nil {
		c.decideBatch(ctx, a, now, live) // unlocks
		return
	}
	// Sampled shards with no room: widen to every shard at once (no backoff, no event); only a
	// pod that no shard can take is unschedulable, and only then may it preempt (preemption
	// compares every shard's candidates: preempt.go).
	sampled := a.targets != nil && len(a.targets) < len(live)
	// No feasible node anywhere: the cheapest preemption candidate wins instead (preempt.go).
	preempt := false
	if winner < 0 && !sampled {
		winner = cheapestPreemption(a.got, live)
		preempt = winner >= 0
	}
	if !a.first.IsZero() {
		c.m.Observe("gather", now.Sub(a.first))
	}
	c.m.Add("decided", 1)
	var deny []int
	for s, p := range a.got {
		if (p.Feasible || p.Preemption != nil) && s != winner {
			deny = append(deny, s)
		}
	}
	if winner >= 0 {
		key := a.key
		c.commits[key] = time.AfterFunc(c.cfg.CommitTimeout, func() { c.commitTimeout(key) })
	}
	c.mu.Unlock()
	if c.cfg.Decided != nil {
		c.cfg.Decided(a.key)
	}

	if len(deny) > 0 {
		go func() { // one goroutine per decision, not per loser
			for _, s := range deny {
				_ = c.send(ctx, s, wire.Decision{Key: a.key, Allow: false, Collector: c.cfg.Index})
			}
		}()
	}
	if winner < 0 && sampled {
		c.m.Add("widened", 1)
		c.requeue(a.key, 0, fmt.Sprintf("widen: none of %d sampled shards has a feasible node", len(a.targets)))
		return
	}
	if winner < 0 {
		c.m.Add("unschedulable", 1)
		why := "no shard has a feasible node"
		for _, p := range a.got {
			if p.Reason != "" {
				why = p.Reason
				break
			}
		}
		delay := min(100*time.Millisecond<<min(a.unsched, 6), 5*time.Second)
		c.requeue(a.key, delay, "unschedulable: "+why)
		return
	}
	if preempt {
		c.m.Add("preemptions", 1)
	} else {
		c.m.Add("allowed", 1)
	}
	if err := c.send(context.WithoutCancel(ctx), winner, wire.Decision{Key: a.key, Allow: true, Collector: c.cfg.Index, Preempt: preempt}); err != nil {
		c.mu.Lock()
		if t, ok := c.commits[a.key]; ok {
			t.Stop()
			delete(c.commits, a.key)
		}
		c.mu.Unlock()
		c.requeue(a.key, 0, "winner unreachable: "+err.Error())
	}
}

func (c *Collector) send(ctx context.Context, shard int, d wire.Decision) error {
	sink, ok := c.cfg.Shards[shard]
	if !ok {
		return fmt.Errorf("unknown shard %d", shard)
	}
	return sink.Decide(ctx, d)
}

func (c *Collector) requeue(key wire.AttemptKey, delay time.Duration, why string) {
	c.m.Add("requeued", 1)
	if c.cfg.Requeue != nil {
		c.cfg.Requeue(key, delay, why)
	}
}

func (c *Collector) commitTimeout(key wire.AttemptKey) {
	c.mu.Lock()
	_, ok := c.commits[key]
	delete(c.commits, key)
	c.mu.Unlock()
	if ok {
		c.m.Add("commit_timeouts", 1)
		c.requeue(key, 0, "winner did not report its bind")
	}
}

// Result implements ProposalSink: the winner's bind outcome.
func (c *Collector) Result(_ context.Context, r wire.CommitResult) error {
	c.mu.Lock()
	t, ok := c.commits[r.Key]
	if ok {
		t.Stop()
		delete(c.commits, r.Key)
	}
	c.lastDone = time.Now()
	c.mu.Unlock()
	if !ok {
		c.m.Add("stale_results", 1)
		return nil
	}
	switch {
	case r.Bound:
		c.m.Add("bound", 1)
		if c.cfg.Finished != nil {
			c.cfg.Finished(r.Key, r.Node, true)
		}
	case r.Gone:
		c.m.Add("gone", 1)
		if c.cfg.Finished != nil {
			c.cfg.Finished(r.Key, r.Node, false)
		}
	case r.Preempted:
		// Victims are being evicted and the pod is nominated to r.Node: retry it soon; it binds
		// once the room is free (the shards answer PreemptWait until then).
		c.m.Add("preempted", 1)
		c.requeue(r.Key, preemptRequeueDelay, "preempted victims on "+r.Node)
	default:
		c.m.Add("conflicts", 1)
		c.requeue(r.Key, 0, "conflict: "+r.Error)
	}
	return nil
}

// WatchDead reports live shards that have been silent for DeadAfter while others answered.
func (c *Collector) WatchDead(ctx context.Context) {
	if c.cfg.DeadAfter <= 0 || c.cfg.OnShardDead == nil {
		return
	}
	t := time.NewTicker(c.cfg.DeadAfter / 4)
	defer t.Stop()
	// A live shard this collector never heard from counts as heard when first seen live: with
	// d-sampled scatter a shard may die before it was ever sent one of this collector's pods,
	// and without this it would stay live (and its nodes unused) for ever.
	liveSince := map[int]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.mu.Lock()
			var newest time.Time
			for _, h := range c.heard {
				if h.After(newest) {
					newest = h
				}
			}
			var dead []int
			live := c.cfg.Live()
			for _, s := range live {
				if _, ok := liveSince[s]; !ok {
					liveSince[s] = now
				}
			}
			if now.Sub(newest) < c.cfg.DeadAfter { // others are answering
				for _, s := range live {
					h, ok := c.heard[s]
					if !ok {
						h = liveSince[s]
					}
					if now.Sub(h) > c.cfg.DeadAfter && c.misses[s] > 0 {
						dead = append(dead, s)
					}
				}
			}
			for _, s := range dead {
				delete(c.heard, s)
				c.misses[s] = 0
				delete(c.awaited, s)
			}
			c.mu.Unlock()
			for _, s := range dead {
				c.m.Add("shards_declared_dead", 1)
				c.cfg.OnShardDead(s)
			}
		}
	}
}
