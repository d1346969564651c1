package shard

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Parallel pods inside one shard (--parallel-pods K).
//
// kube-scheduler runs one scheduling cycle at a time and parallelises inside it (Filter and
// Score over nodes). That stops helping once a shard holds few nodes — a shard of 1M/256 nodes
// that stops at 100 feasible nodes has little to split — so a shard instead evaluates K pods at
// once, as the reference design's 30 scheduling goroutines per replica did. Each worker is an
// evaluator of its own: a framework instance over its own snapshot (UpdateSnapshot rewrites a
// snapshot in place, so two cycles cannot share one) with its own equivalence verdicts, all fed
// by the shard's one scheduler cache. The workers share the shard's filter
// walk (s.walk): each claims the next window of nodes, so they examine different nodes.
//
// Optimistic concurrency, as between shards: a worker evaluates without any lock, then takes
// s.mu — the lock every Reserve/assume/forget of the shard holds — and checks its choice
// (stillFitsLocked): if the chosen node's NodeInfo generation has not moved since the worker's
// snapshot, nothing was reserved there meanwhile and the pod fits; if it moved (another worker
// or a bind landed there), Filter and Score run again on that one node's fresh NodeInfo. A pod
// that no longer fits there, or now scores lower, is evaluated again; after
// maxParallelRetries it is evaluated under s.mu, where no other reservation can intervene.
// Pods that need the global view, and preemption, run under s.mu on the shard's own evaluator.

const maxParallelRetries = 3

// newWorker builds a worker: a framework of the same profile (sharing the shard
// framework's DRA and CSI managers) over a new snapshot of the shard's cache.
func (s *Shard) newWorker(ctx context.Context, profile string) (*evaluator, error) {
	snap := internalcache.NewEmptySnapshot()
	fw, err := newFrameworkSharing(ctx, s.cfg.Client, s.cfg.Informers, snap, s.cache, profile, s.cfg.Parallelism, s.fw)
	if err != nil {
		return nil, err
	}
	return &evaluator{fw: fw, snapshot: snap, eq: newEquivCache(s.cfg.EquivalenceTTL)}, nil
}

// clearEquivalence drops every evaluator's equivalence verdicts (nominations, rebalances).
func (s *Shard) clearEquivalence() {
	s.eq.clear()
	for _, w := range s.workers {
		w.eq.clear()
	}
}

// place evaluates pod with worker w and reserves its node, or finds a preemption candidate.
func (s *Shard) place(ctx context.Context, w *evaluator, h wire.Header, pod *corev1.Pod) (evalResult, *heldPod, preemptAnswer) {
	s.mu.Lock()
	s.noteSeen(pod)
	if s.wantsGlobalLocked(pod) {
		defer s.mu.Unlock()
		return s.placeLocked(ctx, h, pod, s.evaluateLocked(ctx, pod))
	}
	s.mu.Unlock()
	for range maxParallelRetries {
		res := s.evaluateWith(ctx, w, pod)
		s.mu.Lock()
		if res.node == "" || s.stillFitsLocked(ctx, w, pod, res) {
			defer s.mu.Unlock()
			return s.placeLocked(ctx, h, pod, res)
		}
		s.mu.Unlock()
		s.m.Add("parallel_conflicts", 1)
	}
	s.m.Add("parallel_serialised", 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.placeLocked(ctx, h, pod, s.evaluateWith(ctx, s.main, pod))
}

// placeLocked (s.mu held) reserves res's node for pod, or looks for a preemption candidate when
// nothing fits.
func (s *Shard) placeLocked(ctx context.Context, h wire.Header, pod *corev1.Pod, res evalResult) (evalResult, *heldPod, preemptAnswer) {
	var hp *heldPod
	var pre preemptAnswer
	if res.node != "" {
		hp = &heldPod{pod: pod, node: res.node, hdr: h, since: time.Now(), state: res.state, fw: res.fw}
		if r := s.reserveLocked(ctx, hp); r != nil {
			res = evalResult{reason: r.Error}
			hp = nil
		}
	} else if pre = s.preemptionLocked(ctx, pod); pre.cand != nil {
		hp = &heldPod{pod: pod, node: pre.cand.Node, hdr: h, since: time.Now(), preempt: pre.cand}
	}
	return res, hp, pre
}

// stillFitsLocked (s.mu held) reports whether res's node, chosen on w's snapshot, still takes
// pod now that other workers may have reserved room on it.
func (s *Shard) stillFitsLocked(ctx context.Context, w *evaluator, pod *corev1.Pod, res evalResult) bool {
	if err := s.cache.UpdateSnapshot(s.logger, w.snapshot); err != nil {
		return false
	}
	ni, err := w.snapshot.NodeInfos().Get(res.node)
	if err != nil {
		return false // the node left the shard
	}
	if ni.GetGeneration() == res.gen {
		return true
	}
	s.m.Add("reserve_rechecks", 1)
	return s.stillBestLocked(ctx, w, pod, res.state, ni, res.plugin, res.score)
}

// stillBestLocked: node ni, whose generation moved since it was scored at score, still takes
// pod and scores no lower than before (s.mu held). A bind confirming an assumed pod moves the
// generation without changing the score; another worker's reservation lowers it, and the pod is
// then evaluated again rather than stacked on a node it chose before that reservation.
func (s *Shard) stillBestLocked(ctx context.Context, w *evaluator, pod *corev1.Pod, state fwk.CycleState, ni fwk.NodeInfo,
	plugin []fwk.PluginScore, score int64) bool {
	_, total, ok := rescoreNode(ctx, w.fw, state, pod, ni, plugin)
	return ok && total >= score
}
