package shard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// MeasureOpts says under which conditions a shard's cost is measured.
//
// Alone (Shards 1, Workers 1) is one shard on one core: its nodes stay in that core's caches.
// A run with S shards on C cores is not that: every core switches between shards whose node
// tables evict each other, and the cores share counters and memory. Shards S and Workers S
// reproduce it without the rest of the system: S shards of the given size are built (nodes
// owned by hash, as in a run), each evaluating its share of the pods on its own goroutine, all
// on this process's cores as a run's shard goroutines are. The per-pod cost is then what a
// shard of a run of S shards on these cores pays per evaluation; the rest of a run (intake,
// relays, collector, the queueing between them) is the model's to predict.
type MeasureOpts struct {
	Shards  int // shards of `nodes` nodes each (default 1)
	Workers int // goroutines evaluating at once (default 1; at most Shards); worker w takes shards w, w+Workers, …
	// Rounds: the measurement is repeated this many times on the same shards (new pods each
	// round) and the median round is reported (default 1). With 16 goroutines on 2 cores one
	// round's CPU per pod varies by a third from one round to the next (a garbage-collector
	// cycle more or less, the other shards' caches), so one round cannot validate a model to 25 %.
	Rounds int
}

func (o MeasureOpts) norm() MeasureOpts {
	o.Shards = max(o.Shards, 1)
	o.Workers = min(max(o.Workers, 1), o.Shards)
	o.Rounds = max(o.Rounds, 1)
	return o
}

// Cost is one shard's cost per pod: frame decode, then the framework cycle (snapshot,
// PreFilter, Filter, PreScore, Score), then Reserve and assume on the node it proposes, then the
// winner's commit (Permit, PreBind, Bind through a fake client that only counts the Binding,
// PostBind) — every pod is committed on the node the shard picked, so nodes fill up and change
// generation. The *CPUUs figures are the process's CPU in two phases: every pod evaluated and
// reserved, then every pod committed; each phase's CPU (the garbage collector's work included,
// which a CPU-bound run pays like any other work) over its pods. Timing each phase whole keeps
// the figures right when the workers outnumber the cores: a stage's wall time then includes
// waiting for a core.
type Cost struct {
	Nodes, Pods    int
	Opts           MeasureOpts `json:"opts"`
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
	RoundsCPUUs  []float64 `json:"rounds_cpu_us,omitempty"` // every round's CPUUsPerPod (the median round is reported)
}

// measuredShards are o.Shards synced shards of nodes big fake nodes each (Parallelism 1, one
// worker: per-core costs), sharing one informer factory as a run's shards do, and the ReplicaSet
// owner of the pods measured on them. Cancel ctx to stop them.
func measuredShards(ctx context.Context, nodes int, eq time.Duration, feasible int, o MeasureOpts) ([]*Shard, metav1.OwnerReference, error) {
	metrics.Reset()
	ctrl := true
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "m", UID: "m-rs", Controller: &ctrl}
	cs, _ := fakeapi.NewClientCountingBinds(fakeapi.Nodes("m-node", nodes*o.Shards, 32000, 256<<10)...)
	factory := informers.NewSharedInformerFactory(cs, 0)
	var shards []*Shard
	for i := range o.Shards {
		sh, err := New(ctx, Config{Index: i, Count: o.Shards, Client: cs, Informers: factory, Parallelism: 1,
			EquivalenceTTL: eq, FeasibleToFind: feasible, ParallelPods: 1})
		if err != nil {
			return nil, owner, err
		}
		shards = append(shards, sh)
	}
	factory.Start(ctx.Done())
	for _, sh := range shards {
		sh.WaitSynced(ctx)
	}
	return shards, owner, nil
}

// eachWorker runs fn(w) on o.Workers goroutines and returns the first error.
func eachWorker(o MeasureOpts, fn func(w int) error) error {
	errs := make([]error, o.Workers)
	var wg sync.WaitGroup
	for w := range o.Workers {
		wg.Go(func() { errs[w] = fn(w) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Measure times pods pods over shards of nodes nodes (Parallelism 1: per-core cost). Pod j
// goes to shard j mod o.Shards; worker w takes the pods j ≡ w (mod o.Workers), so with Shards a
// multiple of Workers no two workers share a shard. With o.Rounds > 1 it does so o.Rounds times
// (new pods each round, the earlier ones left bound) and returns the round of median CPU.
func Measure(ctx context.Context, nodes, pods int, eq time.Duration, feasible int, o MeasureOpts) (*Cost, error) {
	o = o.norm()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shards, owner, err := measuredShards(ctx, nodes, eq, feasible, o)
	if err != nil {
		return nil, err
	}
	var rounds []*Cost
	for round := range o.Rounds {
		c, err := measureRound(ctx, shards, owner, round, pods, o)
		if err != nil {
			return nil, err
		}
		c.Nodes, c.EquivalenceTTL, c.FeasibleToFind = nodes, eq, feasible
		rounds = append(rounds, c)
	}
	c, all := medianRound(rounds, func(c *Cost) float64 { return c.CPUUsPerPod })
	c.RoundsCPUUs = all
	return c, nil
}

// medianRound sorts rounds by cpu and returns the median one and every round's cpu, lowest first.
func medianRound[T any](rounds []T, cpu func(T) float64) (T, []float64) {
	slices.SortFunc(rounds, func(a, b T) int { return cmp.Compare(cpu(a), cpu(b)) })
	all := make([]float64, len(rounds))
	for i, r := range rounds {
		all[i] = cpu(r)
	}
	return rounds[len(rounds)/2], all
}

// measureRound is one round of Measure: pods new pods evaluated and reserved, then committed.
func measureRound(ctx context.Context, shards []*Shard, owner metav1.OwnerReference, round, pods int, o MeasureOpts) (*Cost, error) {
	var frames [][]byte
	for i := range pods {
		p := fakeapi.Pod("m", fmt.Sprintf("m-pod-%d-%d", round, i), podspec.DefaultSchedulerName, 50, 64)
		p.UID = types.UID(fmt.Sprintf("m-uid-%d-%d", round, i))
		p.OwnerReferences = []metav1.OwnerReference{owner}
		f, err := wire.EncodeFrame(wire.Header{UID: string(p.UID), Namespace: "m", Name: p.Name}, p)
		if err != nil {
			return nil, err
		}
		frames = append(frames, f)
	}
	type stageTimes struct{ dec, ev, res, com time.Duration }
	type reserved struct {
		sh *Shard
		h  *heldPod
	}
	per := make([]stageTimes, o.Workers)
	held := make([][]reserved, o.Workers)
	var fn0, reused0 int64
	for i := range shards {
		fn0 += metrics.Counter(fmt.Sprintf("shard/%d", i), "filter_nodes")
		reused0 += metrics.Counter(fmt.Sprintf("shard/%d", i), "filter_reused")
	}
	cpu0 := metrics.CPUSeconds()
	err := eachWorker(o, func(w int) error {
		t := &per[w]
		for j := w; j < len(frames); j += o.Workers {
			sh := shards[j%len(shards)]
			t0 := time.Now()
			h, pb, err := wire.SplitFrame(frames[j])
			if err != nil {
				return err
			}
			pod, err := wire.DecodePod(pb)
			if err != nil {
				return err
			}
			t1 := time.Now()
			sh.mu.Lock()
			r0 := sh.evaluateLocked(ctx, pod)
			t2 := time.Now()
			if r0.node == "" {
				sh.mu.Unlock()
				return fmt.Errorf("pod %s unschedulable: %s", pod.Name, r0.reason)
			}
			hp := &heldPod{pod: pod, node: r0.node, hdr: h, state: r0.state}
			r := sh.reserveLocked(ctx, hp)
			sh.mu.Unlock()
			if r != nil {
				return fmt.Errorf("reserve: %s", r.Error)
			}
			held[w] = append(held[w], reserved{sh, hp})
			t.dec, t.ev, t.res = t.dec+t1.Sub(t0), t.ev+t2.Sub(t1), t.res+time.Since(t2)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cpu1 := metrics.CPUSeconds()
	err = eachWorker(o, func(w int) error {
		for _, x := range held[w] {
			t0 := time.Now()
			if cr := x.sh.commit(ctx, x.h); !cr.Bound {
				return fmt.Errorf("commit: %s", cr.Error)
			}
			per[w].com += time.Since(t0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cpu2 := metrics.CPUSeconds()
	var dec, ev, res, com time.Duration
	for _, t := range per {
		dec, ev, res, com = dec+t.dec, ev+t.ev, res+t.res, com+t.com
	}
	n := float64(pods)
	c := &Cost{Pods: pods, Opts: o,
		DecodeUs: metrics.Micros(dec) / n, EvalUs: metrics.Micros(ev) / n, ReserveUs: metrics.Micros(res) / n, CommitUs: metrics.Micros(com) / n,
		EvalCPUUs: (cpu1 - cpu0) * 1e6 / n, CommitCPUUs: (cpu2 - cpu1) * 1e6 / n, CPUUsPerPod: (cpu2 - cpu0) * 1e6 / n, Stages: map[string]float64{}}
	var fn, reused int64
	for i := range shards {
		fn += metrics.Counter(fmt.Sprintf("shard/%d", i), "filter_nodes")
		reused += metrics.Counter(fmt.Sprintf("shard/%d", i), "filter_reused")
	}
	if fn > fn0 {
		c.FilterReused = float64(reused-reused0) / float64(fn-fn0)
	}
	m := metrics.For("shard/0")
	for _, k := range []string{"snapshot", "prefilter", "filter", "score"} {
		c.Stages[k] = m.Hist(k).MeanUs
	}
	return c, nil
}

// BatchCost is one shard's cost for a batch of equivalent pods (Parallelism 1, one worker):
// one full cycle for the first pod, then one Filter+Score of one node per further pod; then
// the winner's decision with every slot won: each placeholder swapped for its pod and the pod
// committed (the Binding only counted); or the loser's, every slot released. The *CPUUs
// figures are the process's CPU per phase (every batch planned, then every batch decided),
// the garbage collector's work included.
type BatchCost struct {
	Nodes, Batch, Batches int
	Opts                  MeasureOpts `json:"opts"`
	FirstUs               float64     `json:"first_us"` // a batch of one: the single pod's evaluation
	NextUs                float64     `json:"next_us"`  // each further pod of a batch
	PerPodUs              float64     `json:"per_pod_us"`
	CPUUsPerPod           float64     `json:"cpu_us_per_pod"`
	FirstCPUUs            float64     `json:"first_cpu_us"`
	NextCPUUs             float64     `json:"next_cpu_us"`
	CommitCPUUs           float64     `json:"commit_cpu_us"`           // per pod: swap + commit
	ReleaseCPUUs          float64     `json:"release_cpu_us"`          // per slot a loser releases: Unreserve + forget
	RoundsCPUUs           []float64   `json:"rounds_cpu_us,omitempty"` // every round's CPUUsPerPod (the median round is reported)
}

// MeasureBatch times batches of batch pods on shards of nodes nodes (batch b on shard
// b mod o.Shards, worker w taking b ≡ w mod o.Workers); won slots stay reserved (as if bound),
// so nodes fill as they would. With o.Rounds > 1 it does so o.Rounds times on the same shards
// and returns the round of median CPU per pod.
func MeasureBatch(ctx context.Context, nodes, batches, batch int, eq time.Duration, feasible int, o MeasureOpts) (*BatchCost, error) {
	o = o.norm()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shards, owner, err := measuredShards(ctx, nodes, eq, feasible, o)
	if err != nil {
		return nil, err
	}
	bound0 := make([]int64, len(shards)) // each shard's bound pods so far (worker w writes only its shards')
	var seq atomic.Int64
	frame := func(size int) ([]byte, error) {
		b := seq.Add(1) // every batch's pods are new pods
		h := wire.Header{Namespace: "m", Name: fmt.Sprintf("m-%d-0", b)}
		var pods [][]byte
		for i := range size {
			p := fakeapi.Pod("m", fmt.Sprintf("m-%d-%d", b, i), podspec.DefaultSchedulerName, 100, 64)
			p.UID = types.UID(fmt.Sprintf("m-uid-%d-%d", b, i))
			p.OwnerReferences = []metav1.OwnerReference{owner}
			pb, err := p.Marshal()
			if err != nil {
				return nil, err
			}
			pods = append(pods, pb)
			h.Batch = append(h.Batch, wire.BatchMember{UID: string(p.UID), Name: p.Name})
		}
		h.UID = wire.BatchKeyPrefix + h.Batch[0].UID
		return wire.EncodeBatchFrame(h, pods)
	}
	type planned struct {
		sh *Shard
		hb *heldBatch
	}
	// plan decodes a batch frame of size pods and plans it on sh.
	plan := func(sh *Shard, size int) (*heldBatch, error) {
		f, err := frame(size)
		if err != nil {
			return nil, err
		}
		h, body, err := wire.SplitFrame(f)
		if err != nil {
			return nil, err
		}
		bodies, err := wire.SplitBatch(body, len(h.Batch))
		if err != nil {
			return nil, err
		}
		rep, err := wire.DecodePod(bodies[0])
		if err != nil {
			return nil, err
		}
		hb := &heldBatch{hdr: h, pods: bodies, rep: rep}
		if r := sh.planBatch(ctx, sh.workers[0], hb); len(hb.slots) < size {
			return nil, fmt.Errorf("batch %s: %d of %d placed: %s", h.Name, len(hb.slots), size, r)
		}
		return hb, nil
	}
	// run plans `batches` batches of size pods, then decides them: every slot won (and waits
	// until the shards have bound them) or, with !win, every slot released. It returns the
	// plan's wall and CPU per batch and the decision's CPU per pod.
	run := func(size int, win bool, batches int) (wallUs, planCPUUs, decideCPUUs float64, err error) {
		walls := make([]time.Duration, o.Workers)
		held := make([][]planned, o.Workers)
		cpu0 := metrics.CPUSeconds()
		err = eachWorker(o, func(w int) error {
			for b := w; b < batches; b += o.Workers {
				sh := shards[b%len(shards)]
				t0 := time.Now()
				hb, err := plan(sh, size)
				if err != nil {
					return err
				}
				walls[w] += time.Since(t0)
				held[w] = append(held[w], planned{sh, hb})
			}
			return nil
		})
		if err != nil {
			return 0, 0, 0, err
		}
		cpu1 := metrics.CPUSeconds()
		err = eachWorker(o, func(w int) error {
			// Only this worker decides on its shards (o.norm), so their bound counters are its to wait on.
			want := map[int]int64{}
			for _, p := range held[w] {
				assign := []int{}
				if win {
					assign = make([]int, size)
					for i := range assign {
						assign[i] = i
					}
					want[p.sh.cfg.Index] += int64(size)
				}
				if err := p.sh.decideBatch(ctx, wire.Decision{Key: p.hb.hdr.Key(), Allow: win, Assign: assign, Collector: -1}, p.hb); err != nil {
					return err
				}
			}
			giveUp := time.Now().Add(time.Minute) // a slot refused at the swap is never bound
			for idx, n := range want {
				name := fmt.Sprintf("shard/%d", idx)
				for metrics.Counter(name, "bound") < bound0[idx]+n {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if time.Now().After(giveUp) {
						return fmt.Errorf("shard %d: %d of %d pods bound after a minute", idx, metrics.Counter(name, "bound")-bound0[idx], n)
					}
					time.Sleep(50 * time.Microsecond)
				}
				bound0[idx] += n
			}
			return nil
		})
		if err != nil {
			return 0, 0, 0, err
		}
		cpu2 := metrics.CPUSeconds()
		var wall time.Duration
		for _, d := range walls {
			wall += d
		}
		n := float64(batches)
		return metrics.Micros(wall) / n, (cpu1 - cpu0) * 1e6 / n, (cpu2 - cpu1) * 1e6 / (n * float64(size)), nil
	}
	if _, _, _, err := run(1, true, batches); err != nil { // warm-up: first cycles build caches and equivalence classes
		return nil, err
	}
	// A round times single pods and full batches in alternating short phases (one batch per
	// worker each), not one long phase of each: the further pods' cost is the small difference
	// between the two, and this machine's speed (a garbage-collector cycle, the other shards'
	// caches) moves by more than that between two long phases — a clipped negative difference
	// had put it at 0 where the runs' profiles show tens of µs per pod. Fine alternation lets
	// the drift fall on both sides alike.
	phases := max(1, batches/o.Workers)
	var rounds []*BatchCost
	for range o.Rounds {
		var one, oneCPU, full, fullCPU, commitCPU float64
		for range phases {
			w1, c1, _, err := run(1, true, 4*o.Workers) // single pods are cheap: time more of them
			if err != nil {
				return nil, err
			}
			wb, cb, cc, err := run(batch, true, o.Workers)
			if err != nil {
				return nil, err
			}
			one, oneCPU, full, fullCPU, commitCPU = one+w1, oneCPU+c1, full+wb, fullCPU+cb, commitCPU+cc
		}
		n := float64(phases)
		one, oneCPU, full, fullCPU, commitCPU = one/n, oneCPU/n, full/n, fullCPU/n, commitCPU/n
		_, _, releaseCPU, err := run(batch, false, batches)
		if err != nil {
			return nil, err
		}
		c := &BatchCost{Nodes: nodes, Batch: batch, Batches: phases * o.Workers, Opts: o, FirstUs: one, PerPodUs: full / float64(batch),
			CPUUsPerPod: fullCPU/float64(batch) + commitCPU, FirstCPUUs: oneCPU, CommitCPUUs: commitCPU, ReleaseCPUUs: releaseCPU}
		if batch > 1 {
			// Not clipped per round: a negative round is noise the median and the other rounds
			// must see, not a zero that biases every estimate low.
			c.NextUs = (full - one) / float64(batch-1)
			c.NextCPUUs = (fullCPU - oneCPU) / float64(batch-1)
		}
		rounds = append(rounds, c)
	}
	// The median round's difference, not the median-CPU round's (taken before medianRound
	// re-sorts the rounds by CPU).
	nextRound, _ := medianRound(rounds, func(c *BatchCost) float64 { return c.NextCPUUs })
	next := nextRound.NextCPUUs
	c, all := medianRound(rounds, func(c *BatchCost) float64 { return c.CPUUsPerPod })
	c.RoundsCPUUs = all
	c.NextCPUUs = max(next, 0)
	return c, nil
}
