package shard

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The shard's cache holds only the nodes it owns and the pods bound to them. Handlers filter by
// ownership; SetLive rebalances when shards come and go.

func (s *Shard) onNode(oldObj, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if !s.Owns(n.Name) {
		return
	}
	if old, ok := oldObj.(*corev1.Node); ok {
		s.cache.UpdateNode(s.logger, old, n)
		return
	}
	s.cache.AddNode(s.logger, n)
}

func (s *Shard) onNodeDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*corev1.Node); ok && s.Owns(n.Name) {
		_ = s.cache.RemoveNode(s.logger, n)
	}
}

func (s *Shard) onPod(oldObj, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || !s.Owns(p.Spec.NodeName) {
		return
	}
	old, _ := oldObj.(*corev1.Pod)
	switch {
	case podspec.Terminal(p):
		if old != nil && !podspec.Terminal(old) {
			_ = s.cache.RemovePod(s.logger, old)
		}
	case old != nil && old.Spec.NodeName != "" && !podspec.Terminal(old):
		_ = s.cache.UpdatePod(s.logger, old, p)
	default:
		// A pod we assumed is confirmed here (AddPod of an assumed pod replaces the assumption).
		_ = s.cache.AddPod(s.logger, p)
	}
}

func (s *Shard) onPodDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" && s.Owns(p.Spec.NodeName) && !podspec.Terminal(p) {
		_ = s.cache.RemovePod(s.logger, p)
	}
}

// SetLive changes the membership and rebalances: nodes this shard gains are added with their
// pods, nodes it loses are removed. Returns (gained, lost).
func (s *Shard) SetLive(live []int) (gained, lost int) {
	live = slices.Clone(live)
	slices.Sort(live)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.liveMu.Lock()
	before := s.live
	s.live = live
	s.liveMu.Unlock()
	for _, o := range s.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		h := wire.Hash64(n.Name)
		was, is := wire.OwnerOfHash(h, before) == s.cfg.Index, wire.OwnerOfHash(h, live) == s.cfg.Index
		if was == is {
			continue
		}
		pods, _ := s.pods.GetIndexer().ByIndex(podNodeIndex, n.Name)
		if is {
			gained++
			s.cache.AddNode(s.logger, n)
			for _, po := range pods {
				if p := po.(*corev1.Pod); !podspec.Terminal(p) {
					_ = s.cache.AddPod(s.logger, p)
				}
			}
		} else {
			lost++
			for _, po := range pods {
				_ = s.cache.RemovePod(s.logger, po.(*corev1.Pod))
			}
			_ = s.cache.RemoveNode(s.logger, n)
		}
	}
	s.clearEquivalence()
	s.m.Add("rebalanced_in", int64(gained))
	s.m.Add("rebalanced_out", int64(lost))
	return gained, lost
}
