package shard

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type evalResult struct {
	node   string
	score  int64
	reason string
	state  fwk.CycleState      // the cycle's state, for Reserve/Permit/Bind of the proposal
	fw     framework.Framework // the framework that ran the cycle (nil: the shard's own)
	gen    int64               // the chosen node's NodeInfo generation in the evaluated snapshot
	plugin []fwk.PluginScore   // the chosen node's per-plugin scores
	pods   int                 // pods on the chosen node when it was scored
}

// evaluator is one framework instance over one snapshot, with its own equivalence verdicts and
// filter walk position. The shard's own (s.main) serves the paths that run under s.mu (global
// view, preemption, re-checks); each parallel worker has one of its own (worker.go), so K pods
// are evaluated at once without sharing a snapshot that UpdateSnapshot rewrites in place.
type evaluator struct {
	fw       framework.Framework
	snapshot *internalcache.Snapshot
	eq       *equivCache
}

// evaluate runs the framework's scheduling cycle for pod over this shard's nodes: PreFilter,
// Filter on every node (all of them: no percentageOfNodesToScore sampling, the shard is small),
// PreScore and Score on the feasible ones, and returns the best node and its total score
// (ties broken at random). Unlike kube-scheduler it scores even a single feasible node: the
// collector needs a score to compare shards.
func (s *Shard) evaluate(ctx context.Context, pod *corev1.Pod) evalResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evaluateLocked(ctx, pod)
}

func (s *Shard) evaluateLocked(ctx context.Context, pod *corev1.Pod) evalResult {
	if s.wantsGlobalLocked(pod) {
		return s.evaluateGlobalLocked(ctx, pod)
	}
	return s.evaluateWith(ctx, s.main, pod)
}

// evaluateWith runs the cycle on e's framework and snapshot. It takes no shard lock: e must be
// used by one goroutine at a time (s.main under s.mu, a worker's by that worker).
func (s *Shard) evaluateWith(ctx context.Context, e *evaluator, pod *corev1.Pod) evalResult {
	state, feasible, scores, reason := s.cycle(ctx, e, pod, 0)
	if len(feasible) == 0 {
		return evalResult{reason: reason}
	}
	return s.pick(e, state, feasible, scores)
}

// pick is the result of a cycle on e that found feasible nodes: the best-scored one (bestOf:
// ties to the node holding fewer pods, then at random), with what a later re-check of it needs.
func (s *Shard) pick(e *evaluator, state fwk.CycleState, feasible []fwk.NodeInfo, scores []fwk.NodePluginScores) evalResult {
	best := bestOf(scores, feasible)
	var gen int64
	for _, n := range feasible {
		if n.Node().Name == scores[best].Name {
			gen = n.GetGeneration()
			break
		}
	}
	fw := e.fw
	if e == s.main {
		fw = nil
	}
	return evalResult{node: scores[best].Name, score: scores[best].TotalScore, state: state, fw: fw, gen: gen, plugin: scores[best].Scores,
		pods: podsOn(feasible, best, scores[best].Name)}
}

// cycle runs PreFilter, Filter (looking for at least minFeasible feasible nodes when the walk
// is bounded), PreScore and Score for pod on e, and returns the cycle state, the feasible nodes
// and their scores (none, with the reason, when nothing fits).
func (s *Shard) cycle(ctx context.Context, e *evaluator, pod *corev1.Pod, minFeasible int) (fwk.CycleState, []fwk.NodeInfo, []fwk.NodePluginScores, string) {
	t0 := time.Now()
	if err := s.cache.UpdateSnapshot(s.logger, e.snapshot); err != nil {
		return nil, nil, nil, "snapshot: " + err.Error()
	}
	nodes, err := e.snapshot.NodeInfos().List()
	if err != nil || len(nodes) == 0 {
		return nil, nil, nil, "no nodes in shard"
	}
	s.m.Observe("snapshot", time.Since(t0))

	t1 := time.Now()
	state := framework.NewCycleState()
	preRes, st, _ := e.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		return nil, nil, nil, st.Message()
	}
	if preRes != nil && !preRes.AllNodes() {
		sub := nodes[:0:0]
		for _, n := range nodes {
			if preRes.NodeNames.Has(n.Node().Name) {
				sub = append(sub, n)
			}
		}
		nodes = sub
	}
	s.m.Observe("prefilter", time.Since(t1))

	t2 := time.Now()
	feasible, reason := s.filter(ctx, e, state, pod, nodes, minFeasible)
	s.m.Observe("filter", time.Since(t2))
	if len(feasible) == 0 {
		return nil, nil, nil, reason
	}

	t3 := time.Now()
	defer func() { s.m.Observe("score", time.Since(t3)) }()
	if st := e.fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() && !st.IsSkip() {
		return nil, nil, nil, "prescore: " + st.Message()
	}
	scores, st := e.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return nil, nil, nil, "score: " + st.Message()
	}
	return state, feasible, scores, ""
}

// FeasibleAuto as a FeasibleToFind: each shard stops after kube-scheduler's adaptive number of
// feasible nodes, computed over the shard's own node count.
const FeasibleAuto = -1

// FeasibleLimit is how many feasible nodes a shard of n nodes looks for (0: all). FeasibleAuto
// is kube-scheduler's default percentageOfNodesToScore rule (numFeasibleNodesToFind): every
// node below 100, else 50% − n/125 percentage points, at least 5%, at least 100 nodes. Applied
// per shard, one shard samples exactly as the stock scheduler does over the same nodes, and S
// shards together examine more: at 10K nodes 500 with 1 shard, 2×500 with 2, 4×750 with 4,
// every node once shards hold ≤ 100.
func FeasibleLimit(cfg, n int) int {
	if cfg >= 0 {
		return cfg
	}
	if n < 100 {
		return 0
	}
	pct := max(50-n/125, 5)
	return max(n*pct/100, 100)
}

// FeasibleLimitSampled is the auto limit of one of the d shards a pod is sampled to, when
// there are shards shards of about n nodes each: kube-scheduler's count for the whole cluster
// (FeasibleLimit over n·shards nodes), split over the d shards, so a pod's d shards together
// examine at least what the stock scheduler examines (0, every node, when that is the shard).
func FeasibleLimitSampled(n, shards, d int) int {
	if d <= 0 || shards <= d {
		return FeasibleLimit(FeasibleAuto, n)
	}
	total := FeasibleLimit(FeasibleAuto, n*shards)
	if total == 0 {
		return 0
	}
	per := (total + d - 1) / d
	if per >= n {
		return 0
	}
	return max(per, FeasibleLimit(FeasibleAuto, n))
}

// ParseFeasibleToFind reads the --feasible-to-find flag: "auto", "all" or a count.
func ParseFeasibleToFind(v string) (int, error) {
	switch v {
	case "auto":
		return FeasibleAuto, nil
	case "all", "0":
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--feasible-to-find: want auto, all or a count, got %q", v)
	}
	return n, nil
}

// filter runs Filter over nodes in parallel, reusing verdicts of the pod's equivalence class
// for nodes whose generation has not moved. With FeasibleToFind > 0 it stops once that many
// feasible nodes are found (relaxed randomisation: the walk starts where the previous pod's
// stopped, so every node gets its turn), like kube-scheduler's percentageOfNodesToScore.
func (s *Shard) filter(ctx context.Context, e *evaluator, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo, minFeasible int) ([]fwk.NodeInfo, string) {
	now := time.Now()
	key := EquivalenceKey(ctx, e.fw, pod)
	verdicts := e.eq.class(key, now)
	n := len(nodes)
	const (
		unknown = iota
		pass
		fail
		reusedPass // verdicts from the class cache: not written back
		reusedFail
	)
	verdictAt := make([]uint8, n)
	start := 0
	limit := int64(FeasibleLimit(s.cfg.FeasibleToFind, n))
	if s.cfg.FeasibleToFind == FeasibleAuto && s.cfg.Scatter > 0 {
		limit = int64(FeasibleLimitSampled(n, len(s.liveShards()), s.cfg.Scatter))
	}
	if limit > 0 && limit < int64(minFeasible) {
		limit = int64(minFeasible) // a batch wants room for each of its pods
	}
	if limit > 0 {
		// One walk per shard, shared by its workers: each claims the next window of limit nodes,
		// so like kube-scheduler's single walk a node is examined again only after every other
		// node was (workers walking on their own revisit recently filled nodes, and the integer
		// scores of small pods often tie a node holding one pod with empty ones).
		start = int((s.walk.Add(limit) - limit) % int64(n))
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var firstReason atomic.Pointer[string]
	var reused, found atomic.Int64
	e.fw.Parallelizer().Until(fctx, n, func(i int) {
		idx := (start + i) % n
		nd := nodes[idx]
		ok, hit := false, false
		if v, cached := verdicts[nd]; cached && v.gen == nd.GetGeneration() {
			ok, hit = v.ok, true
			reused.Add(1)
		} else {
			st := e.fw.RunFilterPluginsWithNominatedPods(fctx, state, pod, nd)
			ok = st.IsSuccess()
			if !ok {
				msg := st.Message()
				firstReason.CompareAndSwap(nil, &msg)
			}
		}
		if ok {
			verdictAt[idx] = pass
			if limit > 0 && found.Add(1) >= limit {
				cancel()
			}
		} else {
			verdictAt[idx] = fail
		}
		if hit {
			verdictAt[idx] += reusedPass - pass
		}
	}, "Filter")
	var feasible []fwk.NodeInfo
	examined, last := 0, start
	for i := range n {
		idx := (start + i) % n
		v := verdictAt[idx]
		switch v {
		case unknown:
			continue
		case pass, reusedPass:
			if limit <= 0 || int64(len(feasible)) < limit {
				feasible = append(feasible, nodes[idx])
			}
		}
		examined++
		last = idx
		if verdicts != nil && (v == pass || v == fail) {
			verdicts[nodes[idx]] = verdict{gen: nodes[idx].GetGeneration(), ok: v == pass}
		}
	}
	if walked := int64((last-start+n)%n + 1); limit > 0 && walked > limit {
		s.walk.Add(walked - limit) // infeasible nodes took the walk beyond its window: skip them next time
	}
	s.m.Add("filter_nodes", int64(examined))
	s.m.Add("filter_reused", reused.Load())
	reason := "no feasible node in shard"
	if r := firstReason.Load(); r != nil {
		reason = *r
	}
	return feasible, reason
}
