package scheduler

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// ShardCost is one shard's cost per pod, measured without any apiserver or fake-apiserver
// work in the loop: frame decode, then the framework cycle (snapshot, PreFilter, Filter, PreScore,
// Score), then Reserve and assume on the node it proposes — every pod is assumed on the node
// the shard picked (as the winner's would be), so nodes fill up and change generation.
type ShardCost struct {
	Nodes, Pods    int
	EquivalenceTTL time.Duration
	FeasibleToFind int
	DecodeUs       float64 `json:"decode_us"`
	EvalUs         float64 `json:"eval_us"`   // snapshot+PreFilter+Filter+Score
	CommitUs       float64 `json:"commit_us"` // Reserve + assume of the proposal (the bind RPC is the apiserver's)
	CPUUsPerPod    float64 `json:"cpu_us_per_pod"`
	FilterReused   float64 `json:"filter_reused"`
	Stages         map[string]float64
}

// MeasureShard times one shard of nodes nodes over pods pods (Parallelism 1: per-core cost).
func MeasureShard(ctx context.Context, nodes, pods int, eq time.Duration, feasible int) (*ShardCost, error) {
	ResetMetrics()
	var objs []k8sruntime.Object
	for i := range nodes {
		objs = append(objs, FakeNode(fmt.Sprintf("m-node-%d", i), 32000, 256<<10, 110, nil))
	}
	cs := NewFakeClient(objs...)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sh, err := NewShard(ctx, ShardConfig{Index: 0, Count: 1, Client: cs, Parallelism: 1, EquivalenceTTL: eq, FeasibleToFind: feasible})
	if err != nil {
		return nil, err
	}
	sh.cfg.Informers.Start(ctx.Done())
	sh.WaitSynced(ctx)
	ctrl := true
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "m", UID: "m-rs", Controller: &ctrl}
	var frames [][]byte
	for i := range pods {
		p := FakePod("m", fmt.Sprintf("m-pod-%d", i), DefaultSchedulerName, 50, 64)
		p.UID = types.UID(fmt.Sprintf("m-uid-%d", i))
		p.OwnerReferences = []metav1.OwnerReference{owner}
		f, err := EncodeFrame(Header{UID: string(p.UID), Namespace: "m", Name: p.Name}, p)
		if err != nil {
			return nil, err
		}
		frames = append(frames, f)
	}
	var dec, ev, com time.Duration
	cpu0 := cpuSeconds()
	for _, f := range frames {
		t0 := time.Now()
		h, pb, err := SplitFrame(f)
		if err != nil {
			return nil, err
		}
		pod, err := DecodePod(pb)
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		sh.mu.Lock()
		res := sh.evaluateLocked(ctx, pod)
		t2 := time.Now()
		if res.node == "" {
			sh.mu.Unlock()
			return nil, fmt.Errorf("pod %s unschedulable: %s", pod.Name, res.reason)
		}
		r := sh.reserveLocked(ctx, &heldPod{pod: pod, node: res.node, hdr: h, state: res.state})
		sh.mu.Unlock()
		if r != nil {
			return nil, fmt.Errorf("reserve: %s", r.Error)
		}
		dec, ev, com = dec+t1.Sub(t0), ev+t2.Sub(t1), com+time.Since(t2)
	}
	cpu := cpuSeconds() - cpu0
	n := float64(pods)
	c := &ShardCost{Nodes: nodes, Pods: pods, EquivalenceTTL: eq, FeasibleToFind: feasible,
		DecodeUs: us(dec) / n, EvalUs: us(ev) / n, CommitUs: us(com) / n, CPUUsPerPod: cpu * 1e6 / n, Stages: map[string]float64{}}
	if fn := Counter("shard/0", "filter_nodes"); fn > 0 {
		c.FilterReused = float64(Counter("shard/0", "filter_reused")) / float64(fn)
	}
	m := metricsFor("shard/0")
	for _, k := range []string{"snapshot", "prefilter", "filter", "score"} {
		c.Stages[k] = m.hist(k).MeanUs
	}
	return c, nil
}
