package shard

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

// commit is the winner's half. The shard Reserved the node and assumed the pod when it
// proposed (reserveLocked, under the shard lock, right after the cycle that chose the node), so
// capacity on its own nodes cannot be double-booked: each node is owned by one shard and only
// the owner places pods on it. What can still go wrong is handled as a conflict, and the
// collector requeues the pod: the node changed hands in a rebalance while the decision was
// pending, a Permit/PreBind plugin refuses, or the Binding fails. The collector's allow is
// meganode's Permit; then the framework's own Permit, PreBind, Bind (DefaultBinder: the Binding
// subresource through client-go) and PostBind run as in kube-scheduler.
func (s *Shard) commit(ctx context.Context, h *heldPod) wire.CommitResult {
	r := wire.CommitResult{Key: h.hdr.Key(), Shard: s.cfg.Index, Node: h.node}
	t0 := time.Now()
	defer func() { s.m.Observe("commit", time.Since(t0)) }()
	state, assumed := h.state, h.assumed
	fw := s.frameworkOf(h)
	if !s.Owns(h.node) {
		s.release(ctx, h)
		s.m.Add("conflicts", 1)
		r.Conflict, r.Error = true, "node moved to another shard"
		return r
	}
	fail := func(st *fwk.Status, stage string) wire.CommitResult {
		s.release(ctx, h)
		err := st.AsError()
		switch {
		case apierrors.IsNotFound(err):
			r.Gone, r.Error = true, "pod deleted"
		case err != nil && (apierrors.IsConflict(err) || strings.Contains(err.Error(), "already assigned")):
			r.Gone, r.Error = true, "pod already bound: "+err.Error()
		default:
			s.m.Add("bind_errors", 1)
			s.m.Add("conflicts", 1)
			r.Conflict, r.Error = true, stage+": "+st.Message()
		}
		return r
	}
	if _, st := fw.RunPermitPlugins(ctx, state, assumed, h.node); !st.IsSuccess() {
		// A default-profile Permit plugin asking to wait (gang scheduling, off by default) is not
		// supported: retry later.
		return fail(st, "permit")
	}
	if st := fw.RunPreBindPlugins(ctx, state, assumed, h.node); !st.IsSuccess() {
		return fail(st, "prebind")
	}
	tb := time.Now()
	if st := fw.RunBindPlugins(ctx, state, assumed, h.node); !st.IsSuccess() {
		return fail(st, "bind")
	}
	s.m.Observe("bind", time.Since(tb))
	fw.RunPostBindPlugins(ctx, state, assumed, h.node)
	s.events.Scheduled(assumed, h.node)
	s.m.Add("bound", 1)
	r.Bound = true
	return r
}

// reserveLocked Reserves h.node for h.pod and assumes the pod there (s.mu held). It re-runs
// Filter on that node first only when called without a fresh cycle state.
func (s *Shard) reserveLocked(ctx context.Context, h *heldPod) *wire.CommitResult {
	conflict := func(msg string) *wire.CommitResult {
		s.m.Add("reserve_failures", 1)
		return &wire.CommitResult{Conflict: true, Error: msg}
	}
	if h.state == nil {
		if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
			return conflict(err.Error())
		}
		ni, err := s.snapshot.NodeInfos().Get(h.node)
		if err != nil {
			return conflict("node gone: " + err.Error())
		}
		state := framework.NewCycleState()
		if _, st, _ := s.fw.RunPreFilterPlugins(ctx, state, h.pod); !st.IsSuccess() {
			return conflict("prefilter: " + st.Message())
		}
		if st := s.fw.RunFilterPluginsWithNominatedPods(ctx, state, h.pod, ni); !st.IsSuccess() {
			return conflict("node no longer fits: " + st.Message())
		}
		h.state = state
	}
	// A shallow copy: the assumed pod differs from the pending one only in its node, and the
	// cache and the plugins only read it (its maps and slices stay shared with h.pod). A deep
	// copy per bound pod was the largest part of a 100K-node run's live heap, ≈ 31 %.
	a := *h.pod
	a.Spec.NodeName = h.node
	assumed := &a
	fw := s.frameworkOf(h)
	if st := fw.RunReservePluginsReserve(ctx, h.state, assumed, h.node); !st.IsSuccess() {
		fw.RunReservePluginsUnreserve(ctx, h.state, assumed, h.node)
		return conflict("reserve: " + st.Message())
	}
	if err := s.cache.AssumePod(s.logger, assumed); err != nil {
		fw.RunReservePluginsUnreserve(ctx, h.state, assumed, h.node)
		return conflict("assume: " + err.Error())
	}
	s.assumeGlobalLocked(assumed)
	h.assumed = assumed
	return nil
}

// release undoes reserveLocked: Unreserve and forget the assumed pod (deny, expiry, failure).
func (s *Shard) release(ctx context.Context, h *heldPod) {
	if h.assumed == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frameworkOf(h).RunReservePluginsUnreserve(ctx, h.state, h.assumed, h.node)
	_ = s.cache.ForgetPod(s.logger, h.assumed)
	s.forgetGlobalLocked(h.assumed)
	h.assumed = nil
}
