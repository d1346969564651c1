package shard

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Equivalence classes: pods with the same scheduling signature — same owner and same
// framework signature (framework.SignPod, KEP 5598: requests, selectors, tolerations, node
// affinity, … as each default plugin declares it) — get the same Filter verdict on a node as
// long as that node has not changed. A shard remembers, per signature, each node's verdict and
// the node's NodeInfo generation; for the next pod of the class it runs Filter only on nodes
// whose generation moved (a pod landed or left, the node changed) and reuses the rest, for at
// most ttl. Pods whose Filter verdict depends on other nodes (pod affinity/anti-affinity,
// topology spread) or on volumes are never classed: their key is empty.

type verdict struct {
	gen int64
	ok  bool
}

type equivEntry struct {
	at time.Time
	// nodes is keyed by the snapshot's NodeInfo, not the node name: the scheduler cache updates a
	// node's NodeInfo in place (one pointer per node for the snapshot's life), so the key hashes
	// one pointer instead of a string (string hashing was ~15 % of a shard's CPU at 10K nodes).
	// A deleted node's NodeInfo stays a key until the class expires; the map holding it keeps
	// it from being reused for another node, and the generation check applies as before.
	nodes map[fwk.NodeInfo]verdict
}

type equivCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[uint64]*equivEntry
}

func newEquivCache(ttl time.Duration) *equivCache {
	return &equivCache{ttl: ttl, m: map[uint64]*equivEntry{}}
}

func (c *equivCache) clear() {
	c.mu.Lock()
	c.m = map[uint64]*equivEntry{}
	c.mu.Unlock()
}

// class returns the verdict map of key's class, a new empty one when the class is unknown or
// its first computation is older than ttl (so a class is fully re-filtered at least every ttl);
// nil when the pod is not classable or classes are off. The map is the cache's own: the
// caller writes fresh verdicts into it in place (evaluate holds the shard lock, the only
// writer; a clear() meanwhile only drops the map from the cache). Copying it per pod instead
// cost O(nodes) per pod and dominated the shard's profile at 5K nodes.
func (c *equivCache) class(key uint64, now time.Time) map[fwk.NodeInfo]verdict {
	if c.ttl <= 0 || key == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && now.Sub(e.at) <= c.ttl {
		return e.nodes
	}
	if len(c.m) > 4096 {
		for k, e := range c.m {
			if now.Sub(e.at) > c.ttl {
				delete(c.m, k)
			}
		}
	}
	e := &equivEntry{at: now, nodes: map[fwk.NodeInfo]verdict{}}
	c.m[key] = e
	return e.nodes
}

// EquivalenceKey is the class of a pod (0: not classable).
func EquivalenceKey(ctx context.Context, fw framework.Framework, pod *corev1.Pod) uint64 {
	if a := pod.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		return 0
	}
	if len(pod.Spec.TopologySpreadConstraints) > 0 || len(pod.Spec.ResourceClaims) > 0 {
		return 0
	}
	if pod.Status.NominatedNodeName != "" {
		return 0 // its verdict on its nominated node differs from its class's (preempt.go)
	}
	for _, v := range pod.Spec.Volumes {
		// Volumes no Filter plugin looks at (the service-account token every pod gets is projected).
		if v.Projected == nil && v.ConfigMap == nil && v.Secret == nil && v.DownwardAPI == nil && v.EmptyDir == nil {
			return 0
		}
	}
	// The framework's own signature (KEP 5598) when its feature gate is on; otherwise ours.
	sig := []byte(fw.SignPod(ctx, pod))
	if sig == nil {
		var err error
		if sig, err = podspec.Signature(pod); err != nil {
			return 0
		}
	}
	owner := ""
	if ref := podspec.OwnerOf(pod); ref != nil {
		owner = string(ref.UID)
	}
	b := make([]byte, 0, len(sig)+len(owner)+len(pod.Spec.SchedulerName)+8)
	b = append(b, owner...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(owner)))
	b = append(b, pod.Spec.SchedulerName...)
	b = append(b, sig...)
	h := wire.Hash64(string(b))
	if h == 0 {
		h = 1
	}
	return h
}
