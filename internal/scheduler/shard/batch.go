package shard

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Batches: pods of one equivalence class placed from one Filter + Score pass.
//
// The intake sends a run of pods of one class (same namespace, owner, labels and scheduling
// signature, no inter-pod constraints, first tries) as one frame. A shard runs one full cycle
// for the first pod (the representative), asking Filter for at least as many feasible nodes as
// the batch has pods, and then plans the batch greedily: take the best-scored node, reserve a
// placeholder pod there (Reserve + assume, exactly as for a single pod), re-run Filter and Score
// for that one node with the placeholder counted, put it back with its new score, and repeat
// until every pod has a slot or nothing fits. Only nodes that received a pod are re-scored.
//
// When a score may be reused (kube-scheduler 1.35's OpportunisticBatching, KEP 5598, reuses a
// sorted node list only when the previous pod's node became infeasible, because it cannot
// re-score a used node; we re-score it, so the rule here is about which plugins' scores stay
// valid): a node's score is the sum of per-plugin scores. Placing a pod on node X changes only
// X's node-local inputs, so
//   - NodeResourcesFit, NodeResourcesBalancedAllocation, ImageLocality and DynamicResources (for
//     pods without claims, the only ones batched) are re-computed for X (their score is a
//     function of X alone, with no normalisation across nodes);
//   - TaintToleration and NodeAffinity normalise across the feasible nodes, but their inputs
//     (X's taints and labels) do not change when a pod lands: X keeps its first-pass value;
//   - PodTopologySpread and InterPodAffinity count pods on other nodes and normalise across
//     them: a placement changes every node's score in the domain. The batch is planned greedily
//     only when the first pass skipped both (the framework's skip set: no spread constraint, no
//     affinity term anywhere); any other score plugin (another profile) also disables it.
// Otherwise the shard plans the batch sequentially: a full cycle per slot, with the earlier
// slots reserved — the same placements as unbatched pods, minus the hops.
//
// The shard proposes its slots in order; the collector merges the shards' slot lists, best next
// slot first, and gives each shard a prefix (Decision.Assign): a slot is only ever bound with
// every earlier slot of its shard bound too, so no node is over-committed (each slot was
// filtered with the earlier ones assumed). Placeholders carry their own UIDs; the winning slots
// are swapped for the real pods under s.mu (forget + assume), the rest released.

// rescored are the score plugins whose value is re-computed for a node that got a pod; kept are
// those whose first-pass value stays valid. Any other non-skipped score plugin: no greedy plan.
var (
	rescored = map[string]bool{names.NodeResourcesFit: true, names.NodeResourcesBalancedAllocation: true, names.ImageLocality: true,
		names.DynamicResources: true} // batched pods have no resource claims: its score is a function of the node alone
	kept = map[string]bool{names.TaintToleration: true, names.NodeAffinity: true}
)

// heldBatch is a batch proposal awaiting its decision.
type heldBatch struct {
	hdr   wire.Header
	pods  [][]byte // members' encoded pods, by member index
	rep   *corev1.Pod
	fw    framework.Framework // the framework whose Reserve ran for the slots
	slots []batchSlot
	since time.Time
}

type batchSlot struct {
	node        string
	score       int64
	pods        int // on the node before the slot's reservation
	state       fwk.CycleState
	placeholder *corev1.Pod // assumed in the cache until decided or released
}

// handleBatch evaluates a batch frame and proposes its slots.
func (s *Shard) handleBatch(ctx context.Context, w *evaluator, h wire.Header, body []byte, t0 time.Time) {
	bodies, err := wire.SplitBatch(body, len(h.Batch))
	if err != nil {
		s.m.Add("bad_frames", 1)
		return
	}
	rep, err := wire.DecodePod(bodies[0])
	if err != nil {
		s.m.Add("bad_frames", 1)
		return
	}
	s.m.Observe("decode", time.Since(t0))
	hb := &heldBatch{hdr: h, pods: bodies, rep: rep, since: time.Now()}
	reason := s.planBatch(ctx, w, hb)
	s.m.Add("evaluated", 1)
	s.m.Add("batch_frames", 1)
	s.m.Add("batch_pods", int64(len(h.Batch)))
	s.m.Add("batch_slots", int64(len(hb.slots)))
	p := wire.Proposal{Key: h.Key(), Shard: s.cfg.Index, Feasible: len(hb.slots) > 0, Reason: reason}
	if p.Feasible {
		p.Node, p.Score = hb.slots[0].node, hb.slots[0].score
		p.Slots = make([]wire.Slot, len(hb.slots))
		for i, sl := range hb.slots {
			p.Slots[i] = wire.Slot{Node: sl.node, Score: sl.score, Pods: sl.pods}
		}
		s.held.Store(h.Key(), hb)
	}
	if h.Collector < 0 || h.Collector >= len(s.cfg.Collectors) {
		s.m.Add("bad_collector", 1)
		s.releaseBatch(ctx, hb, 0)
		return
	}
	t1 := time.Now()
	if err := s.cfg.Collectors[h.Collector].Propose(ctx, p); err != nil {
		s.m.Add("propose_errors", 1)
		if _, ok := s.held.LoadAndDelete(h.Key()); ok {
			s.releaseBatch(ctx, hb, 0)
		}
	}
	s.m.Observe("propose", time.Since(t1))
}

// planBatch fills hb.slots (at most one per member) and returns why it stopped short.
func (s *Shard) planBatch(ctx context.Context, w *evaluator, hb *heldBatch) string {
	n := len(hb.hdr.Batch)
	hb.fw = w.fw
	tc := time.Now()
	state, feasible, scores, reason := s.cycle(ctx, w, hb.rep, n)
	if len(feasible) == 0 {
		return reason
	}
	if !greedyOK(state, scores) {
		s.m.Add("batch_sequential", 1)
		return s.planSequential(ctx, w, hb, s.pick(w, state, feasible, scores))
	}
	defer func() { s.m.Observe("batch_plan", time.Since(tc)) }()
	q := make(candQueue, 0, len(scores))
	for i, sc := range scores {
		// RunScorePlugins answers in the order of the nodes it was given; a map from name to
		// node (thousands of inserts per batch) cost 4 % of a 100K-node batch run's CPU.
		if i < len(feasible) && feasible[i].Node().Name == sc.Name {
			ni := feasible[i]
			q = append(q, &cand{ni: ni, gen: ni.GetGeneration(), total: sc.TotalScore, scores: sc.Scores, pods: len(ni.GetPods()), tie: rand.Uint64()})
		}
	}
	heap.Init(&q)
	for len(hb.slots) < n && q.Len() > 0 {
		c := heap.Pop(&q).(*cand)
		name := c.ni.Node().Name
		slotState := state.Clone()
		s.mu.Lock()
		if err := s.cache.UpdateSnapshot(s.logger, w.snapshot); err != nil {
			s.mu.Unlock()
			break
		}
		ni, err := w.snapshot.NodeInfos().Get(name)
		if err != nil {
			s.mu.Unlock()
			continue // left the shard
		}
		if ni.GetGeneration() != c.gen {
			// Another worker reserved here (or a bind was confirmed) since it was scored: score it
			// again and put it back in its place.
			s.mu.Unlock()
			s.m.Add("batch_node_changed", 1)
			if rescoreCand(ctx, w, state, hb.rep, c, ni) {
				heap.Push(&q, c)
			}
			continue
		}
		ph := placeholderPod(hb.rep, hb.hdr, len(hb.slots), name)
		if !s.reservePlaceholderLocked(ctx, w.fw, slotState, ph, name) {
			s.mu.Unlock()
			continue
		}
		_ = s.cache.UpdateSnapshot(s.logger, w.snapshot)
		ni, err = w.snapshot.NodeInfos().Get(name)
		s.mu.Unlock()
		hb.slots = append(hb.slots, batchSlot{node: name, score: c.total, pods: c.pods, state: slotState, placeholder: ph})
		// Does the node take one more pod of the class, and at what score?
		if err == nil && rescoreCand(ctx, w, state, hb.rep, c, ni) {
			heap.Push(&q, c)
			s.m.Add("batch_rescored", 1)
		}
	}
	if len(hb.slots) < n {
		return fmt.Sprintf("room for %d of %d pods of the batch in shard", len(hb.slots), n)
	}
	return ""
}

// rescoreCand re-filters and re-scores candidate c on its node's current NodeInfo ni; false
// when the node no longer takes a pod of the class.
func rescoreCand(ctx context.Context, w *evaluator, state fwk.CycleState, rep *corev1.Pod, c *cand, ni fwk.NodeInfo) bool {
	scores, total, ok := rescoreNode(ctx, w.fw, state, rep, ni, c.scores)
	if !ok {
		return false
	}
	// c was just popped, so every candidate still queued with an equal total has a larger tie:
	// drawing the new tie from above c's keeps c's chance among them uniform (a fresh draw over
	// the whole range would put a node that just got a pod ahead of most of them).
	if c.tie < ^uint64(0) {
		c.tie += rand.Uint64N(^uint64(0) - c.tie)
	}
	c.ni, c.gen, c.scores, c.total, c.pods = ni, ni.GetGeneration(), scores, total, len(ni.GetPods())
	return true
}

// rescoreNode runs Filter and Score for pod on node ni alone and merges the fresh scores into
// the node's earlier per-plugin scores (rescore); ok is false when the node no longer takes pod.
func rescoreNode(ctx context.Context, fw framework.Framework, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo,
	plugin []fwk.PluginScore) ([]fwk.PluginScore, int64, bool) {
	if !fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni).IsSuccess() {
		return nil, 0, false
	}
	fresh, st := fw.RunScorePlugins(ctx, state, pod, []fwk.NodeInfo{ni})
	if !st.IsSuccess() || len(fresh) != 1 {
		return nil, 0, false
	}
	scores, total := rescore(plugin, fresh[0].Scores)
	return scores, total, true
}

// planSequential plans a batch with a full cycle per slot (the earlier slots reserved): used
// when the scores cannot be reused. first is the first cycle's result. A slot whose node was
// taken meanwhile is evaluated again, at most maxParallelRetries times in a row.
func (s *Shard) planSequential(ctx context.Context, w *evaluator, hb *heldBatch, first evalResult) string {
	n := len(hb.hdr.Batch)
	res, lost := first, 0
	for len(hb.slots) < n {
		if res.node == "" {
			return res.reason
		}
		s.mu.Lock()
		ph := placeholderPod(hb.rep, hb.hdr, len(hb.slots), res.node)
		ok := s.stillFitsLocked(ctx, w, hb.rep, res) && s.reservePlaceholderLocked(ctx, w.fw, res.state, ph, res.node)
		s.mu.Unlock()
		if ok {
			hb.slots = append(hb.slots, batchSlot{node: res.node, score: res.score, pods: res.pods, state: res.state, placeholder: ph})
			lost = 0
		} else if lost++; lost >= maxParallelRetries {
			s.m.Add("parallel_serialised", 1)
			return fmt.Sprintf("room for %d of %d pods of the batch in shard (lost the node %d times)", len(hb.slots), n, lost)
		} else {
			s.m.Add("parallel_conflicts", 1)
		}
		if len(hb.slots) < n {
			res = s.evaluateWith(ctx, w, hb.rep)
		}
	}
	return ""
}

// greedyOK: the first pass's scores may be reused for nodes that did not get a pod.
func greedyOK(state fwk.CycleState, scores []fwk.NodePluginScores) bool {
	skip := state.GetSkipScorePlugins()
	for _, p := range []string{names.PodTopologySpread, names.InterPodAffinity} {
		if !skip.Has(p) {
			for _, ps := range scores[0].Scores {
				if ps.Name == p {
					return false
				}
			}
		}
	}
	for _, ps := range scores[0].Scores {
		if !rescored[ps.Name] && !kept[ps.Name] {
			return false
		}
	}
	return true
}

// rescore merges a node's fresh single-node scores into its first-pass ones: re-computed
// plugins take the fresh value, kept plugins their first-pass value.
func rescore(old, fresh []fwk.PluginScore) ([]fwk.PluginScore, int64) {
	out := make([]fwk.PluginScore, len(old))
	var total int64
	for i, o := range old {
		out[i] = o
		if rescored[o.Name] {
			for _, f := range fresh {
				if f.Name == o.Name {
					out[i].Score = f.Score
				}
			}
		}
		total += out[i].Score
	}
	return out, total
}

// placeholderPod stands for slot j of a batch in the cache until the collector decides: a
// shallow copy of the representative (the cache only reads it) with a UID of its own.
func placeholderPod(rep *corev1.Pod, h wire.Header, j int, node string) *corev1.Pod {
	p := *rep
	p.UID = types.UID(fmt.Sprintf("%s#%d", h.UID, j))
	p.Name = fmt.Sprintf("%s#%d", rep.Name, j)
	p.Spec.NodeName = node
	return &p
}

// reservePlaceholderLocked runs Reserve for ph on node and assumes it (s.mu held).
func (s *Shard) reservePlaceholderLocked(ctx context.Context, fw framework.Framework, state fwk.CycleState, ph *corev1.Pod, node string) bool {
	if st := fw.RunReservePluginsReserve(ctx, state, ph, node); !st.IsSuccess() {
		fw.RunReservePluginsUnreserve(ctx, state, ph, node)
		s.m.Add("reserve_failures", 1)
		return false
	}
	if err := s.cache.AssumePod(s.logger, ph); err != nil {
		fw.RunReservePluginsUnreserve(ctx, state, ph, node)
		s.m.Add("reserve_failures", 1)
		return false
	}
	s.assumeGlobalLocked(ph)
	return true
}

// forgetSlotLocked releases slot sl's placeholder (s.mu held).
func (s *Shard) forgetSlotLocked(ctx context.Context, hb *heldBatch, sl *batchSlot) {
	if sl.placeholder == nil {
		return
	}
	hb.fw.RunReservePluginsUnreserve(ctx, sl.state, sl.placeholder, sl.node)
	_ = s.cache.ForgetPod(s.logger, sl.placeholder)
	s.forgetGlobalLocked(sl.placeholder)
	sl.placeholder = nil
}

// releaseBatch releases the slots from index from on.
func (s *Shard) releaseBatch(ctx context.Context, hb *heldBatch, from int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for j := from; j < len(hb.slots); j++ {
		s.forgetSlotLocked(ctx, hb, &hb.slots[j])
	}
}

// decideBatch binds the members the collector assigned to this shard's first slots and
// releases the rest.
func (s *Shard) decideBatch(ctx context.Context, d wire.Decision, hb *heldBatch) error {
	m := min(len(d.Assign), len(hb.slots))
	if m == 0 {
		s.m.Add("denied", 1)
		s.releaseBatch(ctx, hb, 0)
		return nil
	}
	held := make([]*heldPod, m)
	for j := range m {
		idx := d.Assign[j]
		if idx < 0 || idx >= len(hb.hdr.Batch) {
			continue
		}
		pod, err := wire.DecodePod(hb.pods[idx])
		if err != nil {
			continue
		}
		mb := hb.hdr.Batch[idx]
		hdr := wire.Header{UID: mb.UID, Namespace: hb.hdr.Namespace, Name: mb.Name, Attempt: mb.Attempt, Collector: d.Collector}
		held[j] = &heldPod{pod: pod, node: hb.slots[j].node, hdr: hdr, since: time.Now(), state: hb.slots[j].state, fw: hb.fw}
	}
	var failed []wire.CommitResult
	s.mu.Lock()
	for j := range hb.slots {
		s.forgetSlotLocked(ctx, hb, &hb.slots[j])
		if j < m && held[j] != nil {
			// The slot's room goes to the real pod (same class, same requests).
			if r := s.reserveLocked(ctx, held[j]); r != nil {
				r.Key, r.Shard, r.Node = held[j].hdr.Key(), s.cfg.Index, held[j].node
				failed = append(failed, *r)
				held[j] = nil
			}
		}
	}
	s.mu.Unlock()
	for _, r := range failed {
		s.report(ctx, d.Collector, r)
	}
	for j := range m {
		if h := held[j]; h != nil {
			s.m.Add("allowed", 1)
			if err := s.inBackground(ctx, d.Collector, func(ctx context.Context) wire.CommitResult { return s.commit(ctx, h) }); err != nil {
				s.release(ctx, h)
			}
		} else if j < len(d.Assign) {
			// undecodable member: the collector's commit timeout requeues it
			s.m.Add("bad_frames", 1)
		}
	}
	return nil
}

// cand is a node of a batch's greedy plan. Equal totals are ordered by the pods the node holds
// (fewer first, as bestOf), then by tie, drawn again when a node is re-queued (rescoreCand):
// a re-scored node that ties with untouched ones holding as many pods is one of them at random,
// not first again.
type cand struct {
	ni     fwk.NodeInfo
	gen    int64
	total  int64
	scores []fwk.PluginScore
	pods   int // on the node when it was scored
	tie    uint64
}

type candQueue []*cand

func (q candQueue) Len() int { return len(q) }
func (q candQueue) Less(i, j int) bool {
	if q[i].total != q[j].total {
		return q[i].total > q[j].total
	}
	if q[i].pods != q[j].pods {
		return q[i].pods < q[j].pods
	}
	return q[i].tie < q[j].tie
}
func (q candQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *candQueue) Push(x any)   { *q = append(*q, x.(*cand)) }
func (q *candQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
