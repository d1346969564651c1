package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	configv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Preemption across shards. kube-scheduler runs preemption as the DefaultPreemption PostFilter
// plugin over all nodes of one scheduler; here no shard sees all nodes, so the plugin's pieces
// are driven separately (nothing forked):
//
//  1. Dry run, in every shard (handle → preemptionLocked): when no node of the shard fits a pod
//     that may preempt (spec.preemptionPolicy != Never), the shard runs Filter once more to get
//     each node's status, keeps the nodes that failed with a resolvable status (Unschedulable,
//     not UnschedulableAndUnresolvable) and hold at least one lower-priority pod, and hands them
//     to the plugin's own Evaluator.DryRunPreemption — which calls SelectVictimsOnNode on a
//     cloned NodeInfo and cycle state: remove every lower-priority pod, check the pod fits
//     (RunFilterPluginsWithNominatedPods), then reprieve victims most important first, PDB-
//     violating ones first, exactly as in kube-scheduler (PodDisruptionBudgets come from the
//     plugin's PDB lister). Evaluator.SelectCandidate picks the shard's best candidate
//     (pickOneNodeForPreemption). The proposal carries it: node, cost, victims.
//  2. Global choice, in the collector (collector/preempt.go: decide → cheapestPreemption): only
//     when no shard has a feasible node. wire.PreemptionCost encodes pickOneNodeForPreemption's
//     criteria in order, so the cheapest of the shards' bests is the candidate kube-scheduler
//     would have picked had it seen them all (ties at random). That shard gets
//     Decision{Allow, Preempt}; the others deny.
//  3. Eviction, in the chosen shard (preempt): under the shard lock it recomputes the victims on
//     that node from the current snapshot (the proposal may be stale; if the pod now fits without
//     evicting anything it reports a conflict and the pod is simply retried), nominates the pod
//     there in its nominator (nominator.go) so Filter reserves the room for it, then, through
//     the API: sets the preemptor's status.nominatedNodeName, and for every victim adds the
//     DisruptionTarget condition (reason PreemptionByScheduler, as kube-scheduler does) and
//     deletes it with a UID precondition and its own grace period. It clears the nominations of
//     lower-priority pods nominated to the node (as kube-scheduler does) and reports Preempted.
//  4. The collector requeues the pod shortly; it then schedules normally. While the victims
//     terminate, every shard answers PreemptWait for it (its nominated node still holds a
//     terminating lower-priority pod marked by preemption: kube-scheduler's
//     PodEligibleToPreemptOthers rule), so nothing more is evicted for it; and the nomination
//     keeps pods of equal or lower priority off the freed room.
//
// Why the plugin's pieces and not RunPostFilterPlugins: PostFilter would evict at once in every
// shard that has a candidate, before anyone compared them.

// preemptionCost is the cost of evicting v (wire.PreemptionCost: kube-scheduler's criteria).
func preemptionCost(v *extenderv1.Victims) wire.PreemptionCost {
	c := wire.PreemptionCost{PDBViolations: v.NumPDBViolations, HighestPriority: math.MinInt32, Victims: len(v.Pods)}
	for _, p := range v.Pods {
		prio := podPriority(p)
		c.HighestPriority = max(c.HighestPriority, prio)
		c.SumPriorities += int64(prio) + int64(math.MaxInt32) + 1
	}
	if t := schedutil.GetEarliestPodStartTime(v); t != nil {
		c.EarliestStart = t.UnixNano()
	}
	return c
}

// preemptor holds kube-scheduler's DefaultPreemption plugin, built on the shard's framework
// handle (its snapshot lister, nominator, parallelizer and informers); used only for its
// Evaluator (DryRunPreemption, SelectCandidate) and SelectVictimsOnNode, never as a PostFilter.
type preemptor struct {
	pl *defaultpreemption.DefaultPreemption
}

func newPreemptor(ctx context.Context, fw framework.Framework) (*preemptor, error) {
	// The plugin's args as kube-scheduler v1 defaults them (MinCandidateNodesPercentage 10,
	// MinCandidateNodesAbsolute 100), applied per shard: each shard dry-runs at least 10% of its
	// potential nodes, so over S shards about 10% of all of them, as kube-scheduler would.
	var versioned configv1.KubeSchedulerConfiguration
	scheme.Scheme.Default(&versioned)
	var cfg config.KubeSchedulerConfiguration
	if err := scheme.Scheme.Convert(&versioned, &cfg, nil); err != nil {
		return nil, err
	}
	args := &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}
	for _, prof := range cfg.Profiles {
		for _, pc := range prof.PluginConfig {
			if a, ok := pc.Args.(*config.DefaultPreemptionArgs); ok && pc.Name == defaultpreemption.Name {
				args = a
			}
		}
	}
	pl, err := defaultpreemption.New(ctx, args, fw, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, err
	}
	return &preemptor{pl: pl}, nil
}

func (p *preemptor) pdbs() []*policyv1.PodDisruptionBudget {
	if p.pl.Evaluator.PdbLister == nil {
		return nil
	}
	l, _ := p.pl.Evaluator.PdbLister.List(labels.Everything())
	return l
}

// initPreemption gives the shard its nominator (replacing newFramework's placeholder), the
// informer handler that feeds it, and the preemption plugin. New calls it.
func (s *Shard) initPreemption(ctx context.Context) error {
	names := map[string]bool{}
	for _, n := range strings.Split(s.cfg.SchedulerName, ",") {
		names[strings.TrimSpace(n)] = true
	}
	s.nominator = newNominator(func(n string) bool { return names[n] }, s.clearEquivalence)
	s.fw.SetPodNominator(s.nominator)
	for _, w := range s.workers {
		w.fw.SetPodNominator(s.nominator)
	}
	reg, err := s.pods.AddEventHandler(s.nominator.handlers())
	if err != nil {
		return err
	}
	s.synced = append(s.synced, reg.HasSynced)
	s.pre, err = newPreemptor(ctx, s.fw)
	return err
}

// preemptAnswer is what a shard adds to an infeasible proposal.
type preemptAnswer struct {
	cand *wire.PreemptionCandidate
	wait bool
}

// preemptionLocked (s.mu held, right after an evaluation found no feasible node) finds the
// shard's best preemption candidate for pod, if any.
func (s *Shard) preemptionLocked(ctx context.Context, pod *corev1.Pod) preemptAnswer {
	if s.pre == nil || (pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever) {
		return preemptAnswer{}
	}
	if node, wait := s.waitingForVictims(pod); wait {
		s.m.Add("preemption_waiting", 1)
		s.logger.V(4).Info("preemptor waits for its victims", "pod", pod.Namespace+"/"+pod.Name, "node", node)
		return preemptAnswer{wait: true}
	}
	t0 := time.Now()
	defer func() { s.m.Observe("preempt_dryrun", time.Since(t0)) }()
	if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
		return preemptAnswer{}
	}
	nodes, err := s.snapshot.NodeInfos().List()
	if err != nil || len(nodes) == 0 {
		return preemptAnswer{}
	}
	state := framework.NewCycleState()
	preRes, st, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		// kube-scheduler would try preemption after a resolvable PreFilter rejection too; with no
		// PreFilter state the dry run cannot run the plugins' Add/RemovePod extensions: skipped.
		return preemptAnswer{}
	}
	prio := podPriority(pod)
	var mu sync.Mutex
	var potential []fwk.NodeInfo
	fitsNow := false
	s.fw.Parallelizer().Until(ctx, len(nodes), func(i int) {
		ni := nodes[i]
		if preRes != nil && !preRes.AllNodes() && !preRes.NodeNames.Has(ni.Node().Name) {
			return
		}
		lower := false
		for _, p := range ni.GetPods() {
			if podPriority(p.GetPod()) < prio {
				lower = true
				break
			}
		}
		if !lower {
			return // nothing to evict here: SelectVictimsOnNode would say so
		}
		st := s.fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case st.IsSuccess():
			fitsNow = true // an equivalence verdict was stale: the pod fits, no preemption
		case st.Code() == fwk.Unschedulable:
			potential = append(potential, ni)
		}
	}, "PreemptionFilter")
	if fitsNow {
		// A reused equivalence verdict hid a node that fits (e.g. the pod's own nominated node,
		// judged for a sibling that counts the nomination): no preemption anywhere this round,
		// and the next round filters afresh.
		s.eq.clear()
		s.m.Add("preemption_fits_now", 1)
		return preemptAnswer{wait: true}
	}
	if len(potential) == 0 {
		return preemptAnswer{}
	}
	ev := s.pre.pl.Evaluator
	offset, n := s.pre.pl.GetOffsetAndNumCandidates(int32(len(potential)))
	cands, _, err := ev.DryRunPreemption(ctx, state, pod, potential, s.pre.pdbs(), offset, n)
	if len(cands) == 0 {
		if err != nil {
			s.logger.V(2).Info("preemption dry run", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		return preemptAnswer{}
	}
	best := ev.SelectCandidate(ctx, cands)
	if best == nil || best.Name() == "" || len(best.Victims().Pods) == 0 {
		return preemptAnswer{}
	}
	c := &wire.PreemptionCandidate{Node: best.Name(), Cost: preemptionCost(best.Victims())}
	for _, v := range best.Victims().Pods {
		c.Victims = append(c.Victims, v.Namespace+"/"+v.Name)
	}
	s.m.Add("preemption_candidates", 1)
	return preemptAnswer{cand: c}
}

// waitingForVictims applies kube-scheduler's PodEligibleToPreemptOthers rule across shards: a
// pod nominated to a node where a lower-priority pod is terminating because of a preemption
// waits for it instead of evicting more. Any shard can tell (the pod informer sees all pods).
func (s *Shard) waitingForVictims(pod *corev1.Pod) (string, bool) {
	prio := podPriority(pod)
	for _, node := range []string{pod.Status.NominatedNodeName, s.nominator.nominatedNode(pod.UID)} {
		if node == "" {
			continue
		}
		objs, _ := s.pods.GetIndexer().ByIndex(podNodeIndex, node)
		for _, o := range objs {
			if p := o.(*corev1.Pod); !podspec.Terminal(p) && podPriority(p) < prio && terminatingByPreemption(p) {
				return node, true
			}
		}
	}
	return "", false
}

func terminatingByPreemption(p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler
		}
	}
	return false
}

// startPreemption handles the collector's decision on a preemption proposal (Decide, allow).
func (s *Shard) startPreemption(ctx context.Context, d wire.Decision, h *heldPod) error {
	if !d.Preempt {
		s.report(ctx, d.Collector, wire.CommitResult{Key: d.Key, Shard: s.cfg.Index, Conflict: true, Error: "allowed to bind a preemption proposal"})
		return nil
	}
	return s.inBackground(ctx, d.Collector, func(ctx context.Context) wire.CommitResult { return s.preempt(ctx, h) })
}

// victimsLocked recomputes, from the current snapshot, the victims that make pod fit on node.
func (s *Shard) victimsLocked(ctx context.Context, pod *corev1.Pod, node string) ([]*corev1.Pod, error) {
	if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
		return nil, err
	}
	ni, err := s.snapshot.NodeInfos().Get(node)
	if err != nil {
		return nil, fmt.Errorf("node gone: %w", err)
	}
	state := framework.NewCycleState()
	preRes, st, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		return nil, errors.New("prefilter: " + st.Message())
	}
	if preRes != nil && !preRes.AllNodes() && !preRes.NodeNames.Has(node) {
		return nil, errors.New("node excluded by prefilter")
	}
	switch st := s.fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni); {
	case st.IsSuccess():
		return nil, errors.New("pod fits without preemption")
	case st.Code() != fwk.Unschedulable:
		return nil, errors.New("preemption cannot help: " + st.Message())
	}
	victims, _, st := s.pre.pl.SelectVictimsOnNode(ctx, state.Clone(), pod, ni.Snapshot(), s.pre.pdbs())
	if !st.IsSuccess() || len(victims) == 0 {
		return nil, errors.New("no longer a preemption candidate: " + st.Message())
	}
	return victims, nil
}

// preempt evicts the victims for h.pod on h.node (the collector chose this shard's candidate).
func (s *Shard) preempt(ctx context.Context, h *heldPod) wire.CommitResult {
	r := wire.CommitResult{Key: h.hdr.Key(), Shard: s.cfg.Index, Node: h.node}
	t0 := time.Now()
	defer func() { s.m.Observe("preempt", time.Since(t0)) }()
	conflict := func(msg string) wire.CommitResult {
		s.m.Add("preemption_conflicts", 1)
		r.Conflict, r.Error = true, msg
		return r
	}
	if !s.Owns(h.node) {
		return conflict("node moved to another shard")
	}
	pod, node := h.pod, h.node
	s.mu.Lock()
	victims, err := s.victimsLocked(ctx, pod, node)
	if err != nil {
		s.mu.Unlock()
		return conflict(err.Error())
	}
	// Lower-priority pods nominated here may no longer fit: drop their nominations (kube-
	// scheduler does the same) and nominate the preemptor, before anything is evicted, so the
	// freed room is held for it from the first deletion on.
	lower := s.nominator.lowerPriority(node, podPriority(pod))
	for _, p := range lower {
		s.nominator.forget(p.UID)
	}
	s.nominator.nominate(pod, node)
	s.mu.Unlock()

	pods := s.cfg.Client.CoreV1()
	nominate := []byte(fmt.Sprintf(`{"status":{"nominatedNodeName":%q}}`, node))
	if _, err := pods.Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, nominate, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			s.nominator.forget(pod.UID)
			r.Gone, r.Error = true, "pod deleted"
			return r
		}
		// Not fatal: this shard's nominator holds the room; other shards learn it when (if) the
		// status lands.
		s.m.Add("nominate_errors", 1)
		s.logger.Error(err, "set nominatedNodeName", "pod", pod.Namespace+"/"+pod.Name, "node", node)
	}
	msg := fmt.Sprintf("%s: preempting to accommodate a higher priority pod %s/%s", pod.Spec.SchedulerName, pod.Namespace, pod.Name)
	var evicted, failed int
	for _, v := range victims {
		if v.DeletionTimestamp != nil {
			continue // already terminating: nothing to send
		}
		cond, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler,
			Message: msg, LastTransitionTime: metav1.Now()}}}})
		if _, err := pods.Pods(v.Namespace).Patch(ctx, v.Name, types.StrategicMergePatchType, cond, metav1.PatchOptions{}, "status"); err != nil {
			if !apierrors.IsNotFound(err) {
				failed++
				s.logger.Error(err, "mark preemption victim", "victim", v.Namespace+"/"+v.Name)
			}
			continue
		}
		uid := v.UID
		err := pods.Pods(v.Namespace).Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			evicted++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// gone already, or a new pod under the same name: not ours to delete
		default:
			failed++
			s.logger.Error(err, "delete preemption victim", "victim", v.Namespace+"/"+v.Name)
		}
	}
	unnominate := []byte(`{"status":{"nominatedNodeName":null}}`)
	for _, p := range lower {
		_, _ = pods.Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, unnominate, metav1.PatchOptions{}, "status")
	}
	s.m.Add("preemptions", 1)
	s.m.Add("preemption_victims", int64(evicted))
	if failed > 0 {
		s.m.Add("preemption_victim_errors", int64(failed))
	}
	s.logger.V(2).Info("preempted", "pod", pod.Namespace+"/"+pod.Name, "node", node, "victims", evicted, "failed", failed)
	r.Preempted = true
	return r
}
