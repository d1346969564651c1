package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/events"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Config configures one shard.
type Config struct {
	Index         int
	Live          []int // live shard ids (default: 0..Count-1)
	Count         int
	SchedulerName string
	Client        kubernetes.Interface
	// Informers may be shared by several in-process shards (one watch of nodes and pods);
	// each shard keeps only its own nodes and their pods. Start it after New.
	Informers      informers.SharedInformerFactory
	Collectors     []wire.ProposalSink // indexed by collector number
	QueueLen       int                 // frames buffered before Send blocks (default 1024)
	Parallelism    int                 // framework parallelism for Filter/Score (default 16)
	EquivalenceTTL time.Duration       // how long filter results of a pod signature are reused (0: off)
	// BindWorkers bounds the binds and evictions in flight (default 256). A bind is one apiserver
	// round trip (~100 ms on a busy 10K-node cluster), so the bound caps a shard at
	// BindWorkers / bind latency pods/s: 16 capped it near the stock scheduler's rate at 10K
	// nodes (binds queued behind it, and the decision handler with them). kube-scheduler binds
	// each pod on its own goroutine, unbounded; the client's QPS limit still applies here.
	BindWorkers int
	// FeasibleToFind: stop filtering after this many feasible nodes (0: examine every node;
	// FeasibleAuto: kube-scheduler's adaptive count over the shard's own nodes, FeasibleLimit).
	FeasibleToFind int
	// GlobalView: also keep every node and bound pod for pods with cross-node constraints
	// (global_view.go). Off in the zero value; Config turns it on by default.
	GlobalView bool
	// Events: record a Scheduled event for every pod this shard binds (package events).
	Events bool
	// ParallelPods: pods evaluated at once (worker.go), each by a worker with its own framework
	// instance and snapshot; a conflict between them is caught at Reserve. Default 1.
	ParallelPods int
	// Scatter: the d of the collectors' --scatter (0: every shard sees every pod). With
	// FeasibleAuto and d-sampling, the d shards a pod visits together look for as many feasible
	// nodes as kube-scheduler would over the whole cluster (FeasibleLimitSampled).
	Scatter int
}

// Shard runs the kube-scheduler framework over its slice of the nodes: it evaluates every pod
// the relay tree delivers, proposes its best node to the pod's collector and binds when allowed.
type Shard struct {
	cfg      Config
	fw       framework.Framework
	cache    internalcache.Cache
	snapshot *internalcache.Snapshot
	nodes    cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	logger   klog.Logger

	// mu serialises every change to the cache's assumed pods (Reserve, assume, forget) and
	// guards s.main (the framework and snapshot the global view, preemption and re-checks use).
	// Parallel workers evaluate outside it, on their own evaluators (worker.go).
	mu      sync.Mutex
	main    *evaluator
	workers []*evaluator
	walk    atomic.Int64 // where the next bounded filter walk starts (evaluate.go)
	live    []int        // guarded by liveMu
	liveMu  sync.RWMutex

	queue   chan []byte
	held    sync.Map // AttemptKey → *heldPod: evaluated pods awaiting a decision
	eq      *equivCache
	events  *events.Recorders // nil: no events
	m       *metrics.Counters
	bindSem chan struct{}
	stopped chan struct{}
	stop    context.CancelFunc
	synced  []cache.InformerSynced // this shard's handlers have seen the initial lists
	gv      *globalView            // nil: off

	nominator *nominator // pods nominated to nodes by preemption (nominator.go)
	pre       *preemptor // preemption dry run and victim selection (preempt.go)
}

// WaitSynced waits until the shard's cache holds the initial nodes and pods (the handlers, not
// just the informers, have processed the initial lists).
func (s *Shard) WaitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.synced...)
}

// heldPod is a proposal awaiting the collector's decision. The shard has already Reserved the
// node and assumed the pod on it (kube-scheduler's assume-then-Permit), so the next pods it
// evaluates see that capacity as taken; a deny (or expiry) releases it.
type heldPod struct {
	pod     *corev1.Pod
	node    string
	hdr     wire.Header
	since   time.Time
	state   fwk.CycleState
	assumed *corev1.Pod
	fw      framework.Framework       // the framework state belongs to (nil: the shard's own)
	preempt *wire.PreemptionCandidate // a preemption proposal: nothing reserved (preempt.go)
}

const podNodeIndex = "meganode.spec.nodeName"

// New builds the framework and registers the informer handlers. Start the informer
// factory afterwards, then call Run.
func New(ctx context.Context, cfg Config) (*Shard, error) {
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = podspec.DefaultSchedulerName
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 1024
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = 16
	}
	if cfg.BindWorkers <= 0 {
		cfg.BindWorkers = 256
	}
	if cfg.Live == nil {
		cfg.Live = wire.AllShards(max(cfg.Count, cfg.Index+1))
	}
	if cfg.Informers == nil {
		cfg.Informers = informers.NewSharedInformerFactory(cfg.Client, 0)
	}
	s := &Shard{cfg: cfg, live: slices.Clone(cfg.Live), logger: klog.FromContext(ctx).WithValues("shard", cfg.Index),
		queue: make(chan []byte, cfg.QueueLen), m: metrics.For(fmt.Sprintf("shard/%d", cfg.Index)),
		bindSem: make(chan struct{}, cfg.BindWorkers), stopped: make(chan struct{}), eq: newEquivCache(cfg.EquivalenceTTL)}
	// What deploy/grafana/meganode.json plots, on /metrics from the start.
	s.m.Declare([]string{"evaluated", "bound", "conflicts", "late", "missed_decisions"}, []string{"propose", "scatter"})
	registerSchedulerMetrics() // before the cache: its metrics loop records into kube-scheduler's gauges
	s.cache = internalcache.New(ctx, nil, false)
	s.snapshot = internalcache.NewEmptySnapshot()
	profile, _, _ := strings.Cut(cfg.SchedulerName, ",")
	fw, err := newFramework(ctx, cfg.Client, cfg.Informers, s.snapshot, s.cache, strings.TrimSpace(profile), cfg.Parallelism)
	if err != nil {
		return nil, fmt.Errorf("shard %d: framework: %w", cfg.Index, err)
	}
	s.fw = fw
	s.main = &evaluator{fw: fw, snapshot: s.snapshot, eq: s.eq}
	if cfg.ParallelPods <= 0 {
		cfg.ParallelPods = 1
		s.cfg.ParallelPods = 1
	}
	for i := range cfg.ParallelPods {
		w, err := s.newWorker(ctx, strings.TrimSpace(profile))
		if err != nil {
			return nil, fmt.Errorf("shard %d: worker %d: %w", cfg.Index, i, err)
		}
		s.workers = append(s.workers, w)
	}
	if cfg.Events {
		s.events = events.New(ctx, cfg.Client)
	}
	s.nodes = cfg.Informers.Core().V1().Nodes().Informer()
	s.pods = cfg.Informers.Core().V1().Pods().Informer()
	_ = s.pods.AddIndexers(cache.Indexers{podNodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	nreg, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.onNode(nil, o) },
		UpdateFunc: func(old, o any) { s.onNode(old, o) },
		DeleteFunc: s.onNodeDelete,
	})
	if err != nil {
		return nil, err
	}
	preg, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.onPod(nil, o) },
		UpdateFunc: func(old, o any) { s.onPod(old, o) },
		DeleteFunc: s.onPodDelete,
	})
	if err != nil {
		return nil, err
	}
	s.synced = []cache.InformerSynced{nreg.HasSynced, preg.HasSynced}
	if cfg.GlobalView {
		if err := s.initGlobalView(ctx, strings.TrimSpace(profile)); err != nil {
			return nil, fmt.Errorf("shard %d: %w", cfg.Index, err)
		}
		s.synced = append(s.synced, s.gv.synced...)
	}
	if err := s.initPreemption(ctx); err != nil {
		return nil, fmt.Errorf("shard %d: preemption: %w", cfg.Index, err)
	}
	return s, nil
}

// Index is the shard id.
func (s *Shard) Index() int { return s.cfg.Index }

// Owns reports whether node belongs to this shard under the current membership.
func (s *Shard) Owns(node string) bool {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return wire.Owner(node, s.live) == s.cfg.Index
}

// NodeCount is the number of nodes in the shard's cache.
func (s *Shard) NodeCount() int { return s.cache.NodeCount() }

// Run waits for the informers, then evaluates frames until ctx ends or Stop is called.
func (s *Shard) Run(ctx context.Context) error {
	ctx, s.stop = context.WithCancel(ctx)
	defer close(s.stopped)
	if !s.WaitSynced(ctx) {
		return ctx.Err()
	}
	go s.expireHeld(ctx)
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case f := <-s.queue:
					s.handle(ctx, w, f)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// Stop makes the shard stop answering (tests: a killed shard).
func (s *Shard) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

// Send implements FrameSink: the relay tree delivers frames here; it blocks when the queue is full.
func (s *Shard) Send(ctx context.Context, frame []byte) error {
	select {
	case s.queue <- frame:
		return nil
	case <-s.stopped:
		return nil // a dead shard swallows frames; the collector's deadline covers it
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Shard) handle(ctx context.Context, w *evaluator, frame []byte) {
	t0 := time.Now()
	h, podBytes, err := wire.SplitFrame(frame)
	if err != nil {
		s.m.Add("bad_frames", 1)
		return
	}
	if h.SentNanos > 0 {
		s.m.Observe("scatter", time.Since(time.Unix(0, h.SentNanos)))
	}
	if len(h.Batch) > 0 {
		s.handleBatch(ctx, w, h, podBytes, t0)
		return
	}
	pod, err := wire.DecodePod(podBytes)
	if err != nil {
		s.m.Add("bad_frames", 1)
		return
	}
	s.m.Observe("decode", time.Since(t0))
	s.notePlaced(ctx, h.Placed)
	res, hp, pre := s.place(ctx, w, h, pod)
	s.m.Add("evaluated", 1)
	if hp != nil && hp.preempt == nil {
		s.m.Observe("eval_reserve", time.Since(t0))
	}
	p := wire.Proposal{Key: h.Key(), Shard: s.cfg.Index, Node: res.node, Score: res.score, Pods: res.pods, Feasible: res.node != "", Reason: res.reason,
		Preemption: pre.cand, PreemptWait: pre.wait}
	if hp != nil {
		s.held.Store(h.Key(), hp)
	}
	if h.Collector < 0 || h.Collector >= len(s.cfg.Collectors) {
		s.m.Add("bad_collector", 1)
		return
	}
	t1 := time.Now()
	if err := s.cfg.Collectors[h.Collector].Propose(ctx, p); err != nil {
		s.m.Add("propose_errors", 1)
		if v, ok := s.held.LoadAndDelete(h.Key()); ok {
			s.release(ctx, v.(*heldPod))
		}
	}
	s.m.Observe("propose", time.Since(t1))
}

// expireHeld drops evaluated pods whose decision never came (the collector has requeued them).
func (s *Shard) expireHeld(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.held.Range(func(k, v any) bool {
				var since time.Time
				var release func()
				switch h := v.(type) {
				case *heldPod:
					since, release = h.since, func() { s.release(ctx, h) }
				case *heldBatch:
					since, release = h.since, func() { s.releaseBatch(ctx, h, 0) }
				}
				if release != nil && now.Sub(since) > time.Minute {
					if _, ok := s.held.LoadAndDelete(k); ok {
						release()
						s.m.Add("held_expired", 1)
					}
				}
				return true
			})
		}
	}
}

// Decide implements DecisionSink.
func (s *Shard) Decide(ctx context.Context, d wire.Decision) error {
	v, ok := s.held.LoadAndDelete(d.Key)
	if !ok {
		if d.Allow {
			// Nothing held (expired or restarted): report a conflict so the pod is requeued.
			s.report(ctx, d.Collector, wire.CommitResult{Key: d.Key, Shard: s.cfg.Index, Conflict: true, Error: "no held pod"})
		}
		return nil
	}
	if hb, ok := v.(*heldBatch); ok {
		return s.decideBatch(ctx, d, hb)
	}
	h := v.(*heldPod)
	if !d.Allow {
		s.m.Add("denied", 1)
		s.release(ctx, h)
		return nil
	}
	if h.preempt != nil {
		return s.startPreemption(ctx, d, h)
	}
	s.m.Add("allowed", 1)
	return s.inBackground(ctx, d.Collector, func(ctx context.Context) wire.CommitResult { return s.commit(ctx, h) })
}

// inBackground runs work (a bind or an eviction, which call the apiserver) on a goroutine once
// one of the shard's bind slots is free, and reports its result to the collector. The work
// outlives a cancelled decision context: a started bind is finished and reported.
func (s *Shard) inBackground(ctx context.Context, collector int, work func(context.Context) wire.CommitResult) error {
	select {
	case s.bindSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		defer func() { <-s.bindSem }()
		r := work(context.WithoutCancel(ctx))
		s.report(context.WithoutCancel(ctx), collector, r)
	}()
	return nil
}

func (s *Shard) report(ctx context.Context, collector int, r wire.CommitResult) {
	if collector < 0 || collector >= len(s.cfg.Collectors) {
		return
	}
	if err := s.cfg.Collectors[collector].Result(ctx, r); err != nil {
		s.m.Add("result_errors", 1)
	}
}

// liveShards is the current membership.
func (s *Shard) liveShards() []int {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return s.live
}
