package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The global view: correct pod affinity, anti-affinity and topology spread across shards.
//
// A shard's own snapshot holds only its nodes and their pods (the fast path, newFramework), so
// InterPodAffinity and PodTopologySpread would count only this shard's pods per topology
// domain. With the global view a shard keeps a second scheduler cache and snapshot fed, by the
// same informers, with every node and every bound pod of the cluster, plus the pods this shard
// has reserved (assumed) and not yet seen bound; a second framework instance of the same
// profile runs over it. A pod that needs it (podNeedsGlobalView) is evaluated there: PreFilter
// over the whole cluster (the plugins count matching pods per domain over all nodes), then
// Filter, PreScore and Score only over the NodeInfos of this shard's own nodes taken from the
// global snapshot. Each shard still proposes only its own nodes; the counts behind each verdict
// are cluster-wide. Every other pod keeps the fast path.
//
// What a shard cannot see: pods other shards have reserved but not yet bound. The collector's
// intake closes that window for pods with constraints of their own: it keeps at most one attempt
// per constraint group in flight (intake/groups.go) and sends the next pod of the group only once
// the previous one is bound, with the latest placements in the frame header, which shards whose
// informer has not delivered the binding yet assume in their global cache ("ghosts", confirmed
// by the informer or dropped after ghostTTL).
//
// Cost: O(N) memory per shard (every node's NodeInfo and every bound pod, twice: cache and
// snapshot), an incremental snapshot update per evaluated pod, and for constrained pods a
// PreFilter over all N nodes, like kube-scheduler's.
type globalView struct {
	cache    internalcache.Cache
	snapshot *internalcache.Snapshot
	fw       framework.Framework
	ghosts   map[string]ghost // pod UID → placement learnt from a frame (guarded by Shard.mu)
	// seen: constrained pods this shard evaluated, by UID (guarded by Shard.mu). A placement in a
	// frame may name a pod the shard's informer has not delivered at all yet (created, scheduled
	// and bound faster than the watch: seen under load in CI); its labels and affinity terms,
	// which a ghost needs, come from the frame the shard evaluated it from.
	seen   map[string]ghost
	synced []cache.InformerSynced
}

type ghost struct {
	pod *corev1.Pod
	at  time.Time
}

// ghostTTL bounds how long a placement learnt from a frame header stands in for the informer.
const ghostTTL = 30 * time.Second

// initGlobalView builds the second cache, snapshot and framework and registers the informer
// handlers that feed them (every node, every bound non-terminal pod).
func (s *Shard) initGlobalView(ctx context.Context, profile string) error {
	gv := &globalView{cache: internalcache.New(ctx, nil, false), snapshot: internalcache.NewEmptySnapshot(), ghosts: map[string]ghost{}, seen: map[string]ghost{}}
	fw, err := newFrameworkSharing(ctx, s.cfg.Client, s.cfg.Informers, gv.snapshot, gv.cache, profile, s.cfg.Parallelism, s.fw)
	if err != nil {
		return fmt.Errorf("global view framework: %w", err)
	}
	gv.fw = fw
	nreg, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				gv.cache.AddNode(s.logger, n)
			}
		},
		UpdateFunc: func(old, o any) {
			on, ok1 := old.(*corev1.Node)
			n, ok2 := o.(*corev1.Node)
			if ok1 && ok2 {
				gv.cache.UpdateNode(s.logger, on, n)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				_ = gv.cache.RemoveNode(s.logger, n)
			}
		},
	})
	if err != nil {
		return err
	}
	preg, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { gv.onPod(s, nil, o) },
		UpdateFunc: func(old, o any) { gv.onPod(s, old, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" && !podspec.Terminal(p) {
				_ = gv.cache.RemovePod(s.logger, p)
			}
		},
	})
	if err != nil {
		return err
	}
	gv.synced = []cache.InformerSynced{nreg.HasSynced, preg.HasSynced}
	s.gv = gv
	return nil
}

func (gv *globalView) onPod(s *Shard, oldObj, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	old, _ := oldObj.(*corev1.Pod)
	switch {
	case podspec.Terminal(p):
		if old != nil && old.Spec.NodeName != "" && !podspec.Terminal(old) {
			_ = gv.cache.RemovePod(s.logger, old)
		}
	case old != nil && old.Spec.NodeName != "" && !podspec.Terminal(old):
		if _, err := gv.cache.GetPod(old); err != nil {
			_ = gv.cache.AddPod(s.logger, p)
			return
		}
		_ = gv.cache.UpdatePod(s.logger, old, p)
	default:
		// Confirms an assumption (this shard's reservation, or a ghost) or adds the pod.
		_ = gv.cache.AddPod(s.logger, p)
	}
}

// wantsGlobalLocked reports whether pod is evaluated on the global view (s.mu held): it has
// cross-node constraints, or some pod in the cluster has required anti-affinity (which every
// incoming pod must respect, symmetrically). It refreshes the global snapshot.
func (s *Shard) wantsGlobalLocked(pod *corev1.Pod) bool {
	gv := s.gv
	if gv == nil {
		return false
	}
	if err := gv.cache.UpdateSnapshot(s.logger, gv.snapshot); err != nil {
		s.m.Add("global_snapshot_errors", 1)
	}
	if podspec.HasCrossNodeConstraints(pod) {
		return true
	}
	anti, err := gv.snapshot.NodeInfos().HavePodsWithRequiredAntiAffinityList()
	return err == nil && len(anti) > 0
}

// evaluateGlobalLocked is evaluateLocked on the global view (s.mu held; the global snapshot is
// fresh): PreFilter over the whole cluster, Filter/PreScore/Score over this shard's own nodes.
// Every owned node is examined (FeasibleToFind and equivalence classes do not apply: verdicts
// depend on other nodes' pods).
func (s *Shard) evaluateGlobalLocked(ctx context.Context, pod *corev1.Pod) evalResult {
	gv := s.gv
	t0 := time.Now()
	defer func() { s.m.Observe("global_eval", time.Since(t0)) }()
	s.m.Add("global_evaluated", 1)
	if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
		return evalResult{reason: "snapshot: " + err.Error()}
	}
	mine, err := s.snapshot.NodeInfos().List()
	if err != nil || len(mine) == 0 {
		return evalResult{reason: "no nodes in shard"}
	}
	state := framework.NewCycleState()
	preRes, st, _ := gv.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		return evalResult{reason: st.Message()}
	}
	// This shard's nodes, as NodeInfos of the global snapshot (the plugins' PreFilter state
	// refers to the whole cluster; the shard snapshot's copies would lack foreign pods).
	owned := make([]fwk.NodeInfo, 0, len(mine))
	for _, n := range mine {
		name := n.Node().Name
		if preRes != nil && !preRes.AllNodes() && !preRes.NodeNames.Has(name) {
			continue
		}
		if gn, err := gv.snapshot.NodeInfos().Get(name); err == nil {
			owned = append(owned, gn)
		}
	}
	ok := make([]bool, len(owned))
	var firstReason atomic.Pointer[string]
	gv.fw.Parallelizer().Until(ctx, len(owned), func(i int) {
		st := gv.fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, owned[i])
		ok[i] = st.IsSuccess()
		if !ok[i] {
			msg := st.Message()
			firstReason.CompareAndSwap(nil, &msg)
		}
	}, "Filter")
	var feasible []fwk.NodeInfo
	for i, n := range owned {
		if ok[i] {
			feasible = append(feasible, n)
		}
	}
	s.m.Add("filter_nodes", int64(len(owned)))
	if len(feasible) == 0 {
		reason := "no feasible node in shard"
		if r := firstReason.Load(); r != nil {
			reason = *r
		}
		return evalResult{reason: reason}
	}
	if st := gv.fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() && !st.IsSkip() {
		return evalResult{reason: "prescore: " + st.Message()}
	}
	scores, st := gv.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return evalResult{reason: "score: " + st.Message()}
	}
	best := bestOf(scores, feasible)
	return evalResult{node: scores[best].Name, score: scores[best].TotalScore, state: state, fw: gv.fw, pods: podsOn(feasible, best, scores[best].Name)}
}

// bestOf is the index of the highest total score in scores, which RunScorePlugins gave in the
// order of nodes. Among equal totals the node holding the fewest pods wins, then one of those at
// random (kube-scheduler draws among all of them): the integer scores of a small pod tie a node
// holding one such pod with empty ones, and a draw among those piles pods up as a Poisson draw
// does (pods per node stdev ≈ 1 with as many pods as nodes, a third of the nodes empty) where
// the scores meant to spread them.
func bestOf(scores []fwk.NodePluginScores, nodes []fwk.NodeInfo) int {
	best, ties, fewest := -1, 0, 0
	for i := range scores {
		pods := podsOn(nodes, i, scores[i].Name)
		switch {
		case best < 0 || scores[i].TotalScore > scores[best].TotalScore || scores[i].TotalScore == scores[best].TotalScore && pods < fewest:
			best, ties, fewest = i, 1, pods
		case scores[i].TotalScore == scores[best].TotalScore && pods == fewest:
			ties++
			if rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// podsOn is how many pods (bound, assumed or reserved) the node scored at i holds: nodes[i], the
// node RunScorePlugins scored there. A node not found there counts as holding none.
func podsOn(nodes []fwk.NodeInfo, i int, name string) int {
	if i < len(nodes) && nodes[i].Node().Name == name {
		return len(nodes[i].GetPods())
	}
	return 0
}

// frameworkOf is the framework that evaluated h (its cycle state belongs to it).
func (s *Shard) frameworkOf(h *heldPod) framework.Framework {
	if h.fw != nil {
		return h.fw
	}
	return s.fw
}

// assumeGlobalLocked mirrors a reservation into the global cache (s.mu held): the pods this
// shard reserved count for its next constrained pods even before they are bound.
func (s *Shard) assumeGlobalLocked(assumed *corev1.Pod) {
	if s.gv == nil {
		return
	}
	if err := s.gv.cache.AssumePod(s.logger, assumed); err != nil {
		s.m.Add("global_assume_errors", 1)
	}
}

// forgetGlobalLocked undoes assumeGlobalLocked (s.mu held). A pod the informer has meanwhile
// seen bound elsewhere is no longer assumed here and stays.
func (s *Shard) forgetGlobalLocked(assumed *corev1.Pod) {
	if s.gv != nil {
		_ = s.gv.cache.ForgetPod(s.logger, assumed)
	}
}

// notePlaced makes the global view hold the placements a frame carries: a stale reservation of
// this shard for such a pod (its deny is still on the way) is released, and a pod the global
// cache does not hold yet is assumed on its node as a ghost until the informer confirms it.
// noteSeen remembers a constrained pod's object from its frame (for notePlaced; Shard.mu held).
func (s *Shard) noteSeen(pod *corev1.Pod) {
	if gv := s.gv; gv != nil && podspec.HasCrossNodeConstraints(pod) {
		gv.seen[string(pod.UID)] = ghost{pod: pod, at: time.Now()}
	}
}

func (s *Shard) notePlaced(ctx context.Context, placed []wire.Placement) {
	gv := s.gv
	if gv == nil || len(placed) == 0 {
		return
	}
	for _, p := range placed {
		k := wire.AttemptKey{UID: p.UID, Attempt: p.Attempt}
		if v, ok := s.held.Load(k); ok && v.(*heldPod).node != p.Node {
			if _, ok := s.held.LoadAndDelete(k); ok {
				s.release(ctx, v.(*heldPod))
				s.m.Add("released_on_placement", 1)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for uid, g := range gv.ghosts {
		if assumed, err := gv.cache.IsAssumedPod(g.pod); err != nil || !assumed {
			delete(gv.ghosts, uid) // confirmed by the informer (or gone)
		} else if now.Sub(g.at) > ghostTTL {
			_ = gv.cache.ForgetPod(s.logger, g.pod)
			delete(gv.ghosts, uid)
			s.m.Add("ghosts_expired", 1)
		}
	}
	for uid, g := range gv.seen {
		if now.Sub(g.at) > ghostTTL {
			delete(gv.seen, uid)
		}
	}
	for _, p := range placed {
		var pod *corev1.Pod
		if o, ok, _ := s.pods.GetStore().GetByKey(p.Namespace + "/" + p.Name); ok {
			pod = o.(*corev1.Pod)
		} else if g, ok := gv.seen[p.UID]; ok {
			pod = g.pod // not delivered by the watch yet: the object from the frame
		} else {
			s.m.Add("placements_unknown", 1)
			continue
		}
		if string(pod.UID) != p.UID || podspec.Terminal(pod) {
			continue
		}
		if _, err := gv.cache.GetPod(pod); err == nil {
			continue // bound as the informer saw it, or this shard's own reservation (it won)
		}
		g := pod.DeepCopy()
		g.Spec.NodeName = p.Node
		if err := gv.cache.AssumePod(s.logger, g); err == nil {
			gv.ghosts[p.UID] = ghost{pod: g, at: now}
			s.m.Add("ghosts", 1)
		}
	}
}
