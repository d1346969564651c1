package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// ShardCost is one shard's cost per pod: frame decode, then the framework cycle (snapshot,
// PreFilter, Filter, PreScore, Score), then Reserve and assume on the node it proposes, then the
// winner's commit (Permit, PreBind, Bind through a fake client that only counts the Binding,
// PostBind) — every pod is committed on the node the shard picked, so nodes fill up and change
// generation. The *CPUUs figures are the stage times scaled by the process's CPU over the wall
// time of the loop: they include the garbage collector's work for the stage, which runs on
// another core and which a CPU-bound run pays like any other work.
type ShardCost struct {
	Nodes, Pods    int
	EquivalenceTTL time.Duration
	FeasibleToFind int
	DecodeUs       float64 `json:"decode_us"`
	EvalUs         float64 `json:"eval_us"`    // snapshot+PreFilter+Filter+Score
	ReserveUs      float64 `json:"reserve_us"` // Reserve + assume of the proposal
	CommitUs       float64 `json:"commit_us"`  // Permit … PostBind (the Binding only counted)
	// EvalCPUUs is decode + eval + reserve in CPU; CommitCPUUs the commit in CPU.
	EvalCPUUs    float64 `json:"eval_cpu_us"`
	CommitCPUUs  float64 `json:"commit_cpu_us"`
	CPUUsPerPod  float64 `json:"cpu_us_per_pod"`
	FilterReused float64 `json:"filter_reused"`
	Stages       map[string]float64
}

// measuredShard is one synced shard of nodes big fake nodes (Parallelism 1, one worker: per-core
// costs) and the ReplicaSet owner of the pods measured on it. Cancel ctx to stop it.
func measuredShard(ctx context.Context, nodes int, eq time.Duration, feasible int) (*Shard, metav1.OwnerReference, error) {
	ResetMetrics()
	objs := fakeNodes("m-node", nodes, 32000, 256<<10)
	ctrl := true
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "m", UID: "m-rs", Controller: &ctrl}
	cs, _ := NewFakeClientCountingBinds(objs...)
	sh, err := NewShard(ctx, ShardConfig{Index: 0, Count: 1, Client: cs, Parallelism: 1, EquivalenceTTL: eq,
		FeasibleToFind: feasible, ParallelPods: 1})
	if err != nil {
		return nil, owner, err
	}
	sh.cfg.Informers.Start(ctx.Done())
	sh.WaitSynced(ctx)
	return sh, owner, nil
}

// MeasureShard times one shard of nodes nodes over pods pods (Parallelism 1: per-core cost).
func MeasureShard(ctx context.Context, nodes, pods int, eq time.Duration, feasible int) (*ShardCost, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sh, owner, err := measuredShard(ctx, nodes, eq, feasible)
	if err != nil {
		return nil, err
	}
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
	var dec, ev, res, com time.Duration
	cpu0, w0 := cpuSeconds(), time.Now()
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
		r0 := sh.evaluateLocked(ctx, pod)
		t2 := time.Now()
		if r0.node == "" {
			sh.mu.Unlock()
			return nil, fmt.Errorf("pod %s unschedulable: %s", pod.Name, r0.reason)
		}
		held := &heldPod{pod: pod, node: r0.node, hdr: h, state: r0.state}
		r := sh.reserveLocked(ctx, held)
		sh.mu.Unlock()
		if r != nil {
			return nil, fmt.Errorf("reserve: %s", r.Error)
		}
		t3 := time.Now()
		if cr := sh.commit(ctx, held); !cr.Bound {
			return nil, fmt.Errorf("commit: %s", cr.Error)
		}
		dec, ev, res, com = dec+t1.Sub(t0), ev+t2.Sub(t1), res+t3.Sub(t2), com+time.Since(t3)
	}
	cpu, wall := cpuSeconds()-cpu0, time.Since(w0).Seconds()
	n := float64(pods)
	f := cpu / wall // > 1 by the garbage collector's work on the other core
	c := &ShardCost{Nodes: nodes, Pods: pods, EquivalenceTTL: eq, FeasibleToFind: feasible,
		DecodeUs: us(dec) / n, EvalUs: us(ev) / n, ReserveUs: us(res) / n, CommitUs: us(com) / n,
		EvalCPUUs: f * us(dec+ev+res) / n, CommitCPUUs: f * us(com) / n, CPUUsPerPod: cpu * 1e6 / n, Stages: map[string]float64{}}
	if fn := Counter("shard/0", "filter_nodes"); fn > 0 {
		c.FilterReused = float64(Counter("shard/0", "filter_reused")) / float64(fn)
	}
	m := metricsFor("shard/0")
	for _, k := range []string{"snapshot", "prefilter", "filter", "score"} {
		c.Stages[k] = m.hist(k).MeanUs
	}
	return c, nil
}

// BatchCost is one shard's cost for a batch of equivalent pods (Parallelism 1, one worker):
// one full cycle for the first pod, then one Filter+Score of one node per further pod; then
// the winner's decision with every slot won: each placeholder swapped for its pod and the pod
// committed (the Binding only counted). The *CPUUs figures are process CPU, which includes the
// garbage collector's work and the commits running beside the plan.
type BatchCost struct {
	Nodes, Batch, Batches int
	FirstUs               float64 `json:"first_us"` // a batch of one: the single pod's evaluation
	NextUs                float64 `json:"next_us"`  // each further pod of a batch
	PerPodUs              float64 `json:"per_pod_us"`
	CPUUsPerPod           float64 `json:"cpu_us_per_pod"`
	FirstCPUUs            float64 `json:"first_cpu_us"`
	NextCPUUs             float64 `json:"next_cpu_us"`
	CommitCPUUs           float64 `json:"commit_cpu_us"` // per pod: swap + commit
}

// MeasureShardBatch times batches of batch pods on one shard of nodes nodes; every slot stays
// reserved (as if bound), so nodes fill as they would.
func MeasureShardBatch(ctx context.Context, nodes, batches, batch int, eq time.Duration, feasible int) (*BatchCost, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sh, owner, err := measuredShard(ctx, nodes, eq, feasible)
	if err != nil {
		return nil, err
	}
	frame := func(b, size int) ([]byte, error) {
		h := Header{Namespace: "m", Name: fmt.Sprintf("m-%d-0", b)}
		var pods [][]byte
		for i := range size {
			p := FakePod("m", fmt.Sprintf("m-%d-%d", b, i), DefaultSchedulerName, 100, 64)
			p.UID = types.UID(fmt.Sprintf("m-uid-%d-%d", b, i))
			p.OwnerReferences = []metav1.OwnerReference{owner}
			pb, err := p.Marshal()
			if err != nil {
				return nil, err
			}
			pods = append(pods, pb)
			h.Batch = append(h.Batch, BatchMember{UID: string(p.UID), Name: p.Name})
		}
		h.UID = BatchKeyPrefix + h.Batch[0].UID
		return EncodeBatchFrame(h, pods)
	}
	// run plans batches of size pods and decides them; it returns the plan's wall and CPU per
	// batch and the decision's CPU per pod.
	run := func(size int) (wallUs, planCPUUs, commitCPUUs float64, err error) {
		var wall time.Duration
		var planCPU, commitCPU float64
		for b := range batches {
			f, err := frame(b+size*batches, size)
			if err != nil {
				return 0, 0, 0, err
			}
			c0, t0 := cpuSeconds(), time.Now()
			h, body, err := SplitFrame(f)
			if err != nil {
				return 0, 0, 0, err
			}
			bodies, err := SplitBatch(body, len(h.Batch))
			if err != nil {
				return 0, 0, 0, err
			}
			rep, err := DecodePod(bodies[0])
			if err != nil {
				return 0, 0, 0, err
			}
			hb := &heldBatch{hdr: h, pods: bodies, rep: rep}
			if r := sh.planBatch(ctx, sh.workers[0], hb); len(hb.slots) < size {
				return 0, 0, 0, fmt.Errorf("batch %d: %d of %d placed: %s", b, len(hb.slots), size, r)
			}
			wall += time.Since(t0)
			c1 := cpuSeconds()
			planCPU += c1 - c0
			want := Counter("shard/0", "bound") + int64(size)
			assign := make([]int, size)
			for i := range assign {
				assign[i] = i
			}
			if err := sh.decideBatch(ctx, Decision{Key: h.Key(), Allow: true, Assign: assign, Collector: -1}, hb); err != nil {
				return 0, 0, 0, err
			}
			for Counter("shard/0", "bound") < want {
				if ctx.Err() != nil {
					return 0, 0, 0, ctx.Err()
				}
				time.Sleep(50 * time.Microsecond)
			}
			commitCPU += cpuSeconds() - c1
		}
		n := float64(batches)
		return us(wall) / n, planCPU * 1e6 / n, commitCPU * 1e6 / (n * float64(size)), nil
	}
	if _, _, _, err := run(1); err != nil { // warm-up: first cycles build caches and equivalence classes
		return nil, err
	}
	batches *= 4 // single pods are cheap: time more of them
	one, oneCPU, _, err := run(1)
	batches /= 4
	if err != nil {
		return nil, err
	}
	full, fullCPU, commitCPU, err := run(batch)
	if err != nil {
		return nil, err
	}
	c := &BatchCost{Nodes: nodes, Batch: batch, Batches: batches, FirstUs: one, PerPodUs: full / float64(batch),
		CPUUsPerPod: fullCPU/float64(batch) + commitCPU, FirstCPUUs: oneCPU, CommitCPUUs: commitCPU}
	if batch > 1 {
		c.NextUs = max(full-one, 0) / float64(batch-1)
		c.NextCPUUs = max(fullCPU-oneCPU, 0) / float64(batch-1)
	}
	return c, nil
}

// FakeAPICost is the in-process fake apiserver's cost per scheduled pod.
type FakeAPICost struct {
	CPUUsPerPod  float64 `json:"cpu_us_per_pod"`
	WallUsPerPod float64 `json:"wall_us_per_pod"`
	// Concurrency is CPU over wall time with 16 binders: how many cores the fake's work can use
	// at once (its object tracker takes one lock per write; each informer delivers on one goroutine).
	Concurrency float64 `json:"concurrency"`
}

// MeasureFakeAPI measures the in-process fake apiserver without any scheduling: pods listed,
// then bound through the Binding subresource by 16 goroutines, with the informers a simulated
// system runs (the shards' shared nodes and pods, one collector intake's pods) consuming every
// event. The simulator's runs pay this on the same cores; it is the model's ApiUs. counted
// measures the counting fake (NewFakeClientCountingBinds) instead: no write, no event.
func MeasureFakeAPI(ctx context.Context, nodes, pods int, counted bool) (FakeAPICost, error) {
	objs := fakeNodes("f-node", nodes, 8000, 32<<10)
	for i := range pods {
		objs = append(objs, FakePod("f", fmt.Sprintf("f-pod-%d", i), DefaultSchedulerName, 100, 64))
	}
	cs, ledger := fakeClientFor(counted, objs...)
	objs = nil
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shared := informers.NewSharedInformerFactory(cs, 0)
	podInf := shared.Core().V1().Pods().Informer()
	_ = shared.Core().V1().Nodes().Informer()
	intake := informers.NewSharedInformerFactory(cs, 0)
	_ = intake.Core().V1().Pods().Informer()
	var bound atomic.Int64
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			bound.Add(1)
		}
	}})
	shared.Start(ctx.Done())
	intake.Start(ctx.Done())
	shared.WaitForCacheSync(ctx.Done())
	intake.WaitForCacheSync(ctx.Done())
	cpu0, t0 := cpuSeconds(), time.Now()
	next := make(chan int)
	errc := make(chan error, 16)
	for range 16 {
		go func() {
			for i := range next {
				b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "f", Name: fmt.Sprintf("f-pod-%d", i)},
					Target: corev1.ObjectReference{Kind: "Node", Name: fmt.Sprintf("f-node-%d", i%nodes)}}
				if err := cs.CoreV1().Pods("f").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range pods {
		next <- i
	}
	close(next)
	done := func() bool {
		if ledger != nil {
			return ledger.Count() >= pods
		}
		return bound.Load() >= int64(pods)
	}
	for !done() && ctx.Err() == nil {
		select {
		case err := <-errc:
			return FakeAPICost{}, err
		case <-time.After(time.Millisecond):
		}
	}
	cpu, wall := cpuSeconds()-cpu0, time.Since(t0).Seconds()
	return FakeAPICost{CPUUsPerPod: cpu * 1e6 / float64(pods), WallUsPerPod: wall * 1e6 / float64(pods), Concurrency: cpu / wall}, nil
}
