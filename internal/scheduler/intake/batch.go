package intake

import (
	"context"
	"encoding/binary"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The intake's half of batching (shard/batch.go has the shard's, collector/batch.go the
// collector's): pods of one class waiting at the same time leave as one frame of up to --batch
// pods.
//
// A pod is batched only on a plain first try: not constrained (its group is ""), never found
// unschedulable, not widened, not nominated, and classable (batchClass). Pods wait in their
// class's bucket until it is full, until the intake's queue is empty (nothing else is waiting:
// holding pods back then only adds latency), or at most batchLinger.

const batchLinger = 2 * time.Millisecond

type batchEntry struct {
	key     string // ns/name
	pod     *corev1.Pod
	attempt int
}

type bucket struct {
	since   time.Time
	entries []batchEntry
}

// batcher holds the class buckets; the intake's mu guards it.
type batcher struct {
	max     int
	buckets map[uint64]*bucket
}

func newBatcher(max int) *batcher { return &batcher{max: max, buckets: map[uint64]*bucket{}} }

// add puts e in its class's bucket and returns the bucket when it is full.
func (b *batcher) add(cls uint64, e batchEntry) [][]batchEntry {
	bk := b.buckets[cls]
	if bk == nil {
		bk = &bucket{since: time.Now()}
		b.buckets[cls] = bk
	}
	bk.entries = append(bk.entries, e)
	if len(bk.entries) >= b.max {
		delete(b.buckets, cls)
		return [][]batchEntry{bk.entries}
	}
	return nil
}

// flushAll takes every bucket older than age.
func (b *batcher) flushAll(age time.Duration) [][]batchEntry {
	var out [][]batchEntry
	now := time.Now()
	for cls, bk := range b.buckets {
		if now.Sub(bk.since) >= age {
			out = append(out, bk.entries)
			delete(b.buckets, cls)
		}
	}
	return out
}

func (in *Intake) flushLoop(ctx context.Context) {
	t := time.NewTicker(batchLinger)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			in.mu.Lock()
			ready := in.batcher.flushAll(batchLinger)
			in.mu.Unlock()
			for _, b := range ready {
				if !in.sendBatch(ctx, b) {
					return
				}
			}
		}
	}
}

// sendBatch encodes a batch frame (a single pod's frame for a batch of one) and scatters it.
func (in *Intake) sendBatch(ctx context.Context, entries []batchEntry) bool {
	first := entries[0]
	h := wire.Header{UID: string(first.pod.UID), Namespace: first.pod.Namespace, Name: first.pod.Name, Attempt: first.attempt,
		Collector: in.cfg.Collector, SentNanos: time.Now().UnixNano()}
	e := collector.Expectation{Sig: nodeConstraintSig(first.pod)}
	var frame []byte
	var err error
	if len(entries) == 1 {
		frame, err = wire.EncodeFrame(h, first.pod)
	} else {
		h.UID = wire.BatchKeyPrefix + h.UID
		pods := make([][]byte, len(entries))
		for i, be := range entries {
			h.Batch = append(h.Batch, wire.BatchMember{UID: string(be.pod.UID), Name: be.pod.Name, Attempt: be.attempt})
			e.Members = append(e.Members, wire.AttemptKey{UID: string(be.pod.UID), Attempt: be.attempt})
			if pods[i], err = be.pod.Marshal(); err != nil {
				break
			}
		}
		if err == nil {
			frame, err = wire.EncodeBatchFrame(h, pods)
		}
		in.m.Add("batches", 1)
		in.m.Add("batched_pods", int64(len(entries)))
	}
	if err != nil {
		in.m.Add("encode_errors", int64(len(entries)))
		for _, be := range entries {
			in.Requeue(wire.AttemptKey{UID: string(be.pod.UID), Attempt: be.attempt}, 0, "encode: "+err.Error())
		}
		return true
	}
	e.Key = h.Key()
	return in.scatter(ctx, frame, e, false, len(entries))
}

// batchClass is the intake's equivalence class of a pod for batching (0: never batched): pods
// of one namespace, controller, label set and scheduler name with the same node-local
// scheduling signature (podspec.Signature). Labels are part of it because the default profile's
// spread and affinity scoring select pods by label; the shard still checks that those plugins
// were skipped before reusing scores (shard/batch.go).
func batchClass(p *corev1.Pod) uint64 {
	if needsAllShards(p) || len(p.Spec.ResourceClaims) > 0 {
		return 0
	}
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil && v.ConfigMap == nil && v.Secret == nil && v.DownwardAPI == nil && v.EmptyDir == nil {
			return 0
		}
	}
	sig, err := podspec.Signature(p)
	if err != nil {
		return 0
	}
	owner := ""
	if ref := podspec.OwnerOf(p); ref != nil {
		owner = string(ref.UID)
	}
	keys := make([]string, 0, len(p.Labels))
	for k := range p.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := make([]byte, 0, 256+len(sig))
	for _, f := range []string{p.Namespace, owner, p.Spec.SchedulerName} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(p.Labels[k])))
		b = append(b, p.Labels[k]...)
	}
	b = append(b, sig...)
	h := wire.Hash64(string(b))
	if h == 0 {
		h = 1
	}
	return h
}
