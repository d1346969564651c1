// Package sim is the in-process simulator: a whole scheduler (scheduler.StartAll, every role in
// one process) against the fake apiserver, timed stage by stage (Simulate), and the
// microbenchmarks of the hops (MeasureHops) and of the fake apiserver itself (MeasureFakeAPI)
// that `meganode scheduler simulate` feeds its model with beside the shard's own costs
// (shard.Measure). It runs the whole system, so it sits above the root package.
package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/relay"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Config configures the in-process simulator: a fake clientset (no apiserver), the real
// framework in every shard, in-process relays and collectors.
type Config struct {
	Nodes, Pods, Shards, Fanout  int
	Parallelism                  int           // framework parallelism per shard (1 = CPU cost per pod)
	EquivalenceTTL               time.Duration // <0 off
	Fraction                     float64
	Timeout                      time.Duration
	FeasibleToFind               int
	Scatter, Batch, ParallelPods int // as Config (0: their defaults)
	// Precreate: every pod exists before the scheduler starts (as `scheduler bench` creates them
	// while the scheduler is stopped); the clock starts when the scheduler has synced.
	Precreate bool
	// CountedBinds: Bindings are recorded, not written (fakeapi.NewClientCountingBinds): the run
	// measures the scheduler without the fake apiserver's per-bind watch fan-out. Without it the
	// pods are written and every informer sees the binding (fakeapi.NewClientRecordingBinds;
	// client-go's fake watcher panics when 100 events queue up, so only at modest rates).
	CountedBinds bool
	// GlobalView: "off" in the scale runs (uniform pods need none, and it holds every node in
	// every shard); "" keeps Config's default.
	GlobalView string
	// Workload: WorkloadUniform ("") or WorkloadMixed (workload.go).
	Workload   string
	Collectors int // as Config (0: its default)
	InFlight   int // as Config: attempts (a batch is one) between send and decision per collector (0: its default)
	// Sample: the bound count and the resident set are recorded this often (Result.Timeline; 0: not).
	Sample time.Duration
	// RoleCPU: the run's CPU is split by role from a CPU profile of the run (rolecpu.go).
	RoleCPU bool
	// RankSample: after the run, this many pods (spread evenly over the order of the Bindings)
	// are ranked by kube-scheduler's own scoring over every node, in the state of the pods bound
	// before them (rank.go). 0: not.
	RankSample int
	Progress   *bench.Progress `json:"-"` // setup and run phases (nil: quiet)
	// HeapProfile: write the heap profile (live objects after a GC) here when the last pod is
	// bound, before anything is released: what the run's memory is made of.
	HeapProfile string `json:"heap_profile,omitempty"`
}

// Sample is one point of a run's timeline.
type Sample struct {
	Seconds  float64 `json:"seconds"` // since the clock started
	Bound    int64   `json:"bound"`
	RSSBytes uint64  `json:"rss_bytes"`
}

// Result is what one simulated run measured.
type Result struct {
	Config        Config                   `json:"config"`
	Seconds       float64                  `json:"seconds"`
	Bound         int                      `json:"bound"`
	PodsPerSec    float64                  `json:"pods_per_sec"`
	Conflicts     int64                    `json:"conflicts"`
	Unschedulable int64                    `json:"unschedulable"`
	FilterReused  float64                  `json:"filter_reused_fraction"`
	Stages        map[string]bench.Latency `json:"stages"`    // per pod per shard (µs), shard 0
	Collector     map[string]bench.Latency `json:"collector"` // gather, schedule
	CPUSeconds    float64                  `json:"cpu_seconds"`
	EmptyNodes    int                      `json:"empty_nodes"`
	Widened       int64                    `json:"widened"`
	Decided       int64                    `json:"decided"`     // attempts decided (a batch is one)
	Evaluations   int64                    `json:"evaluations"` // shard evaluations (a batch is one)
	// Frames the intakes sent (a batch is one frame, however many shards it went to) and how
	// many of them were re-sends (a later attempt: a pod or a batch's rest that was not placed).
	Frames            int64   `json:"frames"`
	Resent            int64   `json:"resent"`
	ParallelConflicts int64   `json:"parallel_conflicts"`
	MaxPerNode        int     `json:"max_pods_per_node"`
	StddevPerNode     float64 `json:"stddev_pods_per_node"`
	// SetupSeconds: objects created in the fake apiserver, every role started and synced (before the clock).
	SetupSeconds float64 `json:"setup_seconds"`
	// RoleCPU: CPUSeconds split by role in the proportions of the run's CPU profile (RoleCPU);
	// RoleCPUSampled is what the profile itself sampled, for its coverage of CPUSeconds.
	RoleCPU        map[string]float64 `json:"role_cpu_seconds,omitempty"`
	RoleCPUSampled float64            `json:"role_cpu_sampled_seconds,omitempty"`
	// PeakRSSBytes: the process's peak resident set when the last pod was bound (setup included).
	PeakRSSBytes uint64   `json:"peak_rss_bytes"`
	Timeline     []Sample `json:"timeline,omitempty"`
	// Overcommitted: nodes whose bound pods request more CPU, memory or pods than they have (must be 0).
	Overcommitted int `json:"overcommitted_nodes"`
	// SpreadMaxSkew: the largest zone skew of a topology-spread group (mixed workload; maxSkew is 1).
	SpreadMaxSkew int          `json:"spread_max_skew,omitempty"`
	Rank          *RankSummary `json:"rank,omitempty"`
}

// Simulate runs P pods over N fake nodes with S shards in this process and times every stage.
func Simulate(ctx context.Context, sc Config) (*Result, error) {
	metrics.Reset()
	if sc.Timeout <= 0 {
		sc.Timeout = 10 * time.Minute
	}
	if err := checkWorkload(sc.Workload); err != nil {
		return nil, err
	}
	setup := time.Now()
	precreated := 0
	if sc.Precreate {
		precreated = sc.Pods
	}
	sc.Progress.Phase(fmt.Sprintf("creating %d nodes and %d pods (%s) in the in-process apiserver", sc.Nodes, precreated, cmp.Or(sc.Workload, WorkloadUniform)))
	objs := workloadObjects(sc.Workload, sc.Nodes, precreated) // KWOK nodes of `up`
	// Either way the Bindings are recorded in order (placement checks, ranking); with
	// CountedBinds they are not written.
	newClient := fakeapi.NewClientRecordingBinds
	var lean *fakeapi.Lean
	switch {
	case sc.CountedBinds && sc.Precreate:
		// Nothing is written after creation: the nodes and pods are kept once, shared with the
		// informers, not in the tracker and again in every informer's list; once the informers
		// have synced, the fake answers from their store and drops its own copy.
		newClient = func(objs ...runtime.Object) (*fake.Clientset, *fakeapi.BindLedger) {
			cs, l, ln := fakeapi.NewClientCountingBindsLean(objs...)
			lean = ln
			return cs, l
		}
	case sc.CountedBinds:
		newClient = fakeapi.NewClientCountingBinds
	}
	cs, ledger := newClient(objs...)
	objs = nil
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sc.Progress.Phase(fmt.Sprintf("starting %d shards, relays and %d collector(s); informers syncing", sc.Shards, max(sc.Collectors, 1)))
	sys, err := scheduler.StartAll(ctx, scheduler.Config{Client: cs, Shards: sc.Shards, Fanout: sc.Fanout, Parallelism: sc.Parallelism,
		EquivalenceTTL: sc.EquivalenceTTL, Fraction: sc.Fraction, DeadAfter: -1, QueueLen: 4096, FeasibleToFind: sc.FeasibleToFind,
		Scatter: sc.Scatter, Batch: sc.Batch, ParallelPods: sc.ParallelPods, GlobalView: sc.GlobalView, Collectors: sc.Collectors,
		InFlight: sc.InFlight, NoEvents: true}) // events are apiserver writes, which the simulator does not model
	if err != nil {
		return nil, err
	}
	if lean != nil {
		lean.ServeFrom(sys.Informers.Core().V1().Nodes().Lister(), sys.Informers.Core().V1().Pods().Lister())
	}
	setupSeconds := time.Since(setup).Seconds()
	// Bound pods, as the collectors count them (a watch on the fake clientset cannot keep up
	// with 100K binds).
	bound := &atomic.Int64{}
	fc := cs // cs is dropped before ranking; this loop may still be running then
	go func() {
		for k := 0; ctx.Err() == nil; k++ {
			var n int64
			for i := range sys.Collectors {
				n += metrics.Counter(fmt.Sprintf("collector/%d", i), "bound")
			}
			bound.Store(n)
			if k%250 == 0 {
				// client-go's fake keeps a deep copy of every request it served (two per
				// Binding) for tests' Actions(); nothing here reads them.
				fc.ClearActions()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var prof *RoleProfile
	if sc.RoleCPU {
		if prof, err = StartRoleProfile(); err != nil {
			return nil, fmt.Errorf("simulation: role CPU: %w", err)
		}
		defer func() {
			if prof != nil {
				_, _ = prof.Stop()
			}
		}()
	}
	cpu0 := metrics.CPUSeconds()
	began := time.Now()
	var timeline []Sample
	var tlMu sync.Mutex
	if sc.Sample > 0 {
		go func() {
			t := time.NewTicker(sc.Sample)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					rss, _ := memStatus()
					tlMu.Lock()
					timeline = append(timeline, Sample{Seconds: time.Since(began).Seconds(), Bound: bound.Load(), RSSBytes: rss})
					tlMu.Unlock()
				}
			}
		}()
	}
	if !sc.Precreate {
		go func() {
			for i := range sc.Pods {
				if _, err := cs.CoreV1().Pods("sim").Create(ctx, workloadPod(sc.Workload, i), metav1.CreateOptions{}); err != nil {
					return
				}
			}
		}()
	}
	sc.Progress.Start(fmt.Sprintf("binding %d pods", sc.Pods), int64(sc.Pods), 0, bound.Load)
	deadline := time.After(sc.Timeout)
	for bound.Load() < int64(sc.Pods) {
		select {
		case <-deadline:
			sc.Progress.Done()
			return nil, fmt.Errorf("simulation: %d of %d pods bound after %s", bound.Load(), sc.Pods, sc.Timeout)
		case <-ctx.Done():
			sc.Progress.Done()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	el := time.Since(began)
	cpuRun := metrics.CPUSeconds() - cpu0
	sc.Progress.Done()
	_, peak := memStatus()
	if sc.HeapProfile != "" {
		if err := writeHeapProfile(sc.HeapProfile); err != nil {
			return nil, err
		}
	}
	r := &Result{Config: sc, Seconds: el.Seconds(), Bound: int(bound.Load()), PodsPerSec: float64(bound.Load()) / el.Seconds(),
		CPUSeconds: cpuRun, Stages: map[string]bench.Latency{}, Collector: map[string]bench.Latency{},
		SetupSeconds: setupSeconds, PeakRSSBytes: peak}
	if prof != nil {
		roles, err := prof.Stop()
		prof = nil
		if err != nil {
			return nil, err
		}
		for _, v := range roles {
			r.RoleCPUSampled += v
		}
		if r.RoleCPUSampled > 0 { // else too short a run for a sample: missing, not zero
			r.RoleCPU = map[string]float64{}
			for _, role := range Roles {
				r.RoleCPU[role] = roles[role] / r.RoleCPUSampled * cpuRun
			}
		}
	}
	tlMu.Lock()
	r.Timeline = append(timeline, Sample{Seconds: el.Seconds(), Bound: bound.Load()})
	r.Timeline[len(r.Timeline)-1].RSSBytes, _ = memStatus()
	tlMu.Unlock()
	var per map[string]int
	if ledger != nil {
		per = ledger.PerNode()
		if n := ledger.Count(); n != r.Bound {
			return nil, fmt.Errorf("simulation: the collectors counted %d binds, the apiserver took %d", r.Bound, n)
		}
	} else if pl, err := cs.CoreV1().Pods("sim").List(ctx, metav1.ListOptions{}); err == nil {
		per = map[string]int{}
		for _, p := range pl.Items {
			per[p.Spec.NodeName]++
		}
	}
	if ledger != nil {
		r.Overcommitted, r.SpreadMaxSkew = checkPlacements(sc.Workload, sc.Nodes, ledger.Binds())
	}
	if per != nil {
		mean := float64(sc.Pods) / float64(sc.Nodes)
		for i := range sc.Nodes {
			c := per[fmt.Sprintf("sim-node-%d", i)]
			if c == 0 {
				r.EmptyNodes++
			}
			r.MaxPerNode = max(r.MaxPerNode, c)
			r.StddevPerNode += (float64(c) - mean) * (float64(c) - mean) / float64(sc.Nodes)
		}
		r.StddevPerNode = math.Sqrt(r.StddevPerNode)
	}
	for i := range sys.Collectors {
		r.Conflicts += metrics.Counter(fmt.Sprintf("collector/%d", i), "conflicts")
		r.Unschedulable += metrics.Counter(fmt.Sprintf("collector/%d", i), "unschedulable")
		r.Widened += metrics.Counter(fmt.Sprintf("collector/%d", i), "widened")
		r.Decided += metrics.Counter(fmt.Sprintf("collector/%d", i), "decided")
		r.Frames += framesSent(i)
		r.Resent += metrics.Counter(fmt.Sprintf("intake/%d", i), "resent")
	}
	for i := range sys.Shards {
		r.Evaluations += metrics.Counter(fmt.Sprintf("shard/%d", i), "evaluated")
		r.ParallelConflicts += metrics.Counter(fmt.Sprintf("shard/%d", i), "parallel_conflicts")
	}
	if n := metrics.Counter("shard/0", "filter_nodes"); n > 0 {
		r.FilterReused = float64(metrics.Counter("shard/0", "filter_reused")) / float64(n)
	}
	m := metrics.For("shard/0")
	for _, k := range []string{"scatter", "decode", "snapshot", "prefilter", "filter", "score", "propose", "commit", "bind"} {
		r.Stages[k] = m.Hist(k)
	}
	r.Collector["gather"] = metrics.For("collector/0").Hist("gather")
	r.Collector["schedule"] = metrics.For("intake/0").Hist("schedule")
	if sc.RankSample > 0 {
		// The scheduler is done: stop it and let its memory go before the ranker builds its own.
		cancel()
		binds := ledger.Binds()
		sys, cs, ledger = nil, nil, nil
		if r.Rank, err = rankPlacements(parent, sc, binds); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// runPod is pod i of a run: a ReplicaSet-like run, one owner and identical requests (100m CPU,
// 64Mi; what equivalence classes target).
func runPod(i int) *corev1.Pod {
	ctrl := true
	p := fakeapi.Pod("sim", fmt.Sprintf("sim-pod-%d", i), podspec.DefaultSchedulerName, 100, 64)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "sim", UID: "sim-rs", Controller: &ctrl}}
	p.Labels = map[string]string{"app": "sim"}
	return p
}

// framesSent is the frames collector i's intake sent: to every shard or to the sampled ones.
func framesSent(i int) int64 {
	name := fmt.Sprintf("intake/%d", i)
	return metrics.Counter(name, "scattered_all") + metrics.Counter(name, "scattered_sampled")
}

// HopCosts are microbenchmarks of the scatter and gather hops on this machine.
type HopCosts struct {
	EncodeUs         float64 `json:"encode_us"`               // intake: pod → frame
	RelayChildUs     float64 `json:"relay_child_us"`          // relay: forward one frame to one in-process child
	GRPCFrameUs      float64 `json:"grpc_frame_us"`           // one frame over a gRPC loopback stream (both ends)
	GRPCUnaryUs      float64 `json:"grpc_unary_us"`           // one unary control message round trip (Propose)
	GRPCStreamPropUs float64 `json:"grpc_stream_proposal_us"` // one proposal on the Control stream, handled by a collector
	CollectorUs      float64 `json:"collector_prop_us"`       // collector: handle one proposal in-process
	FrameBytes       int     `json:"frame_bytes"`
}

// MeasureHops times the hops with many repetitions.
func MeasureHops(ctx context.Context) (HopCosts, error) {
	var h HopCosts
	pod := fakeapi.Pod("ns", "hop-pod", podspec.DefaultSchedulerName, 50, 64)
	const n = 20000
	t0 := time.Now()
	var frame []byte
	for i := range n {
		frame, _ = wire.EncodeFrame(wire.Header{UID: "u", Namespace: "ns", Name: "hop-pod", Attempt: i}, pod)
	}
	h.EncodeUs = metrics.Micros(time.Since(t0)) / n
	h.FrameBytes = len(frame)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const kids = 10
	var sinks []wire.FrameSink
	var cnt []*countingSink
	for range kids {
		c := &countingSink{}
		cnt = append(cnt, c)
		sinks = append(sinks, c)
	}
	r := relay.New(ctx, "hop", sinks, 4096)
	t0 = time.Now()
	for range n {
		_ = r.Send(ctx, frame)
	}
	for _, c := range cnt {
		for c.n.Load() < n {
			time.Sleep(time.Millisecond)
		}
	}
	h.RelayChildUs = metrics.Micros(time.Since(t0)) / (n * kids)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return h, err
	}
	leaf := &countingSink{}
	col := collector.New(collector.Config{Index: 98, Shards: map[int]wire.DecisionSink{}, Live: func() []int { return wire.AllShards(1 << 20) }, Deadline: time.Hour})
	go func() { _ = wire.Serve(ctx, lis, wire.Node{Frames: leaf, Proposals: col}) }()
	c, err := wire.Dial(ctx, lis.Addr().String(), 4096)
	if err != nil {
		return h, err
	}
	defer c.Close()
	t0 = time.Now()
	for range n {
		_ = c.Send(ctx, frame)
	}
	for leaf.n.Load() < n {
		time.Sleep(time.Millisecond)
	}
	h.GRPCFrameUs = metrics.Micros(time.Since(t0)) / n
	const u = 3000
	t0 = time.Now()
	for i := range u {
		_ = c.ProposeSync(ctx, wire.Proposal{Key: wire.AttemptKey{UID: "g", Attempt: i}, Shard: 1, Node: "n", Score: 1, Feasible: true})
	}
	h.GRPCUnaryUs = metrics.Micros(time.Since(t0)) / u
	// Streamed proposals (what the roles use): time until the collector has counted them all.
	base := metrics.Counter("collector/98", "unknown_proposals")
	t0 = time.Now()
	for i := range n {
		_ = c.Propose(ctx, wire.Proposal{Key: wire.AttemptKey{UID: "s", Attempt: i}, Shard: 1, Node: "n", Score: 1, Feasible: false})
	}
	for metrics.Counter("collector/98", "unknown_proposals")-base < n {
		time.Sleep(time.Millisecond)
	}
	h.GRPCStreamPropUs = metrics.Micros(time.Since(t0)) / n

	// Collector: 256 shards answer each attempt (in-process), decisions included.
	const shards = 256
	live := wire.AllShards(shards)
	col2 := collector.New(collector.Config{Index: 99, Shards: map[int]wire.DecisionSink{}, Live: func() []int { return live }, Deadline: time.Hour})
	t0 = time.Now()
	for a := range n / shards * 4 {
		key := wire.AttemptKey{UID: "p", Attempt: a}
		col2.Expect(key, 0)
		for s := range shards {
			_ = col2.Propose(ctx, wire.Proposal{Key: key, Shard: s, Node: "n", Score: int64(s % 7), Feasible: true})
		}
	}
	h.CollectorUs = metrics.Micros(time.Since(t0)) / float64(n/shards*4*shards)
	return h, nil
}

type countingSink struct{ n atomic.Int64 }

func (c *countingSink) Send(context.Context, []byte) error { c.n.Add(1); return nil }

// fakeClientFor is fakeapi.NewClientCountingBinds when counted, else fakeapi.NewClient (nil ledger).
func fakeClientFor(counted bool, objs ...runtime.Object) (*fake.Clientset, *fakeapi.BindLedger) {
	if counted {
		return fakeapi.NewClientCountingBinds(objs...)
	}
	return fakeapi.NewClient(objs...), nil
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
// measures the counting fake (fakeapi.NewClientCountingBinds) instead: no write, no event.
func MeasureFakeAPI(ctx context.Context, nodes, pods int, counted bool) (FakeAPICost, error) {
	objs := fakeapi.Nodes("f-node", nodes, 8000, 32<<10)
	for i := range pods {
		objs = append(objs, fakeapi.Pod("f", fmt.Sprintf("f-pod-%d", i), podspec.DefaultSchedulerName, 100, 64))
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
	cpu0, t0 := metrics.CPUSeconds(), time.Now()
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
	cpu, wall := metrics.CPUSeconds()-cpu0, time.Since(t0).Seconds()
	return FakeAPICost{CPUUsPerPod: cpu * 1e6 / float64(pods), WallUsPerPod: wall * 1e6 / float64(pods), Concurrency: cpu / wall}, nil
}
