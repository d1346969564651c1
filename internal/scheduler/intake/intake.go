package intake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/events"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Config configures the intake of one collector.
type Config struct {
	Client        kubernetes.Interface
	SchedulerName string
	Collector     int // this collector's index: it takes the pods CollectorOf maps to it
	Collectors    int
	Root          wire.FrameSink // root of the relay tree
	Workers       int            // parallel senders (default 4)
	// InFlight bounds the attempts between send and decision (default 64). It keeps the shards
	// in step: no shard can fall more than InFlight pods behind the fastest, so under a backlog
	// they still answer within the collector's deadline instead of drifting apart (a lagging
	// shard would lose every pod to the fastest one and its nodes would stay empty).
	InFlight int
	// Source is where pods come from: ModeWatch (default, the field-selected watch) or
	// ModeWebhook (pods offered by the admission webhook, plus a periodic LIST: webhook.go).
	Source  string
	Webhook WebhookOptions // ModeWebhook: reconcile period and grace
	// SerializeConstrained: at most one attempt per constraint group in flight (groups.go;
	// on with the shards' global view).
	SerializeConstrained bool
	// Events: record a FailedScheduling event for every attempt that found no node (package events).
	Events bool
	// Scatter: send each pod to this many shards picked by the collector (collector/scatter.go)
	// straight through ShardSinks; collector.ScatterAll or 0: every shard, through Root.
	Scatter    int
	ShardSinks map[int]wire.FrameSink
	// Batch: at most this many pods of one equivalence class per frame (batch.go); ≤ 1: off.
	Batch int
	// Pods, when set, is an informer of every pod that this process runs anyway (the in-process
	// system's shards keep one for their caches). The intake then filters that informer's events
	// instead of opening its own field-selected watch: the apiserver serialises and sends each
	// pod event once to this process instead of twice (the second stream carried an Added and a
	// Deleted per pod — on the 2-core 5K-node bench the apiserver is the bound: clusterbench's
	// per-process CPU). Separate collector processes have no such informer and keep the
	// field-selected watch, which sends them only the pods they schedule.
	Pods cache.SharedIndexInformer
}

type podState struct {
	attempt  int
	inflight bool
	unsched  int
	seen     time.Time
	wide     bool // sent to every shard from now on (no sampled shard had room: collector/scatter.go)
}

// Intake watches unscheduled pods with spec.schedulerName (a field-selected watch:
// spec.schedulerName=<name>,spec.nodeName=), encodes each of its pods once into a frame and
// sends it into the relay tree. It owns the retry loop: requeued attempts come back here and
// are re-sent with Attempt+1 from the latest object, until the pod is bound or deleted.
type Intake struct {
	cfg       Config
	collector *collector.Collector
	factories []informers.SharedInformerFactory
	informers []cache.SharedIndexInformer // one field-selected watch per scheduler name
	queue     workqueue.TypedDelayingInterface[string]
	mu        sync.Mutex
	state     map[string]*podState     // by ns/name
	uids      map[string]string        // uid → ns/name
	window    chan struct{}            // InFlight slots
	holding   map[wire.AttemptKey]bool // attempts holding a slot
	names     map[string]bool          // spec.schedulerName values served
	m         *metrics.Counters
	hist      *metrics.Counters
	wh        *webhookStore // ModeWebhook: the pods' latest objects (webhook.go); nil with the watch
	groups    *groupGate    // nil: constrained pods are not serialised
	events    *events.Recorders
	batcher   *batcher // nil: no batches
}

// New registers the watch; call Run to start it.
func New(cfg Config, collector *collector.Collector) *Intake {
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = podspec.DefaultSchedulerName
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 64
	}
	in := &Intake{cfg: cfg, collector: collector, state: map[string]*podState{}, uids: map[string]string{}, names: map[string]bool{},
		window: make(chan struct{}, cfg.InFlight), holding: map[wire.AttemptKey]bool{},
		queue: workqueue.NewTypedDelayingQueue[string](), m: metrics.For(fmt.Sprintf("intake/%d", cfg.Collector))}
	in.m.Declare(nil, []string{"schedule"}) // plotted by deploy/grafana/meganode.json
	if cfg.Source == ModeWebhook {
		in.wh = newWebhookStore(cfg.Webhook)
	}
	if cfg.SerializeConstrained {
		in.groups = newGroupGate(func(k string) { in.queue.Add(k) })
	}
	if cfg.Batch > 1 {
		in.batcher = newBatcher(cfg.Batch)
	}
	for _, name := range strings.Split(cfg.SchedulerName, ",") {
		in.names[strings.TrimSpace(name)] = true
	}
	switch {
	case in.wh != nil:
		return in // no watch: the webhook and the reconcile LIST feed this intake
	case cfg.Pods != nil:
		in.informers = append(in.informers, cfg.Pods)
		_, _ = cfg.Pods.AddEventHandler(cache.FilteringResourceEventHandler{FilterFunc: in.unscheduledOfOurs, Handler: in.handlers()})
		return in
	}
	for name := range in.names {
		sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.schedulerName", name),
			fields.OneTermEqualSelector("spec.nodeName", "")).String()
		f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }))
		inf := f.Core().V1().Pods().Informer()
		in.factories = append(in.factories, f)
		in.informers = append(in.informers, inf)
		_, _ = inf.AddEventHandler(in.handlers())
	}
	return in
}

// unscheduledOfOurs is the field-selected watch's filter applied to a shared informer's pods
// (Config.Pods): unscheduled, with one of our scheduler names. A pod that stops passing it
// (bound, or its scheduler name changed) reaches the handlers as a delete, as it does from the
// field-selected watch.
func (in *Intake) unscheduledOfOurs(o any) bool {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	p, ok := o.(*corev1.Pod)
	return ok && p.Spec.NodeName == "" && in.names[p.Spec.SchedulerName]
}

func (in *Intake) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				in.add(p, SourceWatch)
			}
		},
		UpdateFunc: func(_, o any) {
			// A field-selected watch turns binding into a delete; without field selectors
			// (fake clientsets) it is an update.
			if p, ok := o.(*corev1.Pod); ok && (p.Spec.NodeName != "" || podspec.Terminal(p)) {
				in.forget(p)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				in.forget(p) // bound (left the selector) or deleted
			}
		},
	}
}

// add takes an unscheduled pod of ours that source (SourceWatch, SourceWebhook, SourceReconcile)
// reports; it counts pods_from_<source> for pods it did not know yet.
func (in *Intake) add(p *corev1.Pod, source string) bool {
	if !in.names[p.Spec.SchedulerName] || !in.mine(p) || podspec.Terminal(p) || p.Spec.NodeName != "" {
		return false
	}
	k := p.Namespace + "/" + p.Name
	in.mu.Lock()
	if in.wh != nil {
		in.putLocked(k, p)
	}
	_, known := in.state[k]
	if !known {
		in.state[k] = &podState{seen: time.Now()}
		in.uids[string(p.UID)] = k
	}
	in.mu.Unlock()
	if !known {
		in.m.Add("pods_from_"+source, 1)
		in.queue.Add(k)
	}
	return !known
}

// get looks a pod up in the watches' stores (or the webhook intake's).
func (in *Intake) get(key string) (*corev1.Pod, bool) {
	if in.wh != nil {
		return in.webhookGet(key)
	}
	for _, inf := range in.informers {
		// A shared informer (Config.Pods) holds bound pods too: those are no longer ours to send.
		if o, ok, _ := inf.GetStore().GetByKey(key); ok && in.unscheduledOfOurs(o) {
			return o.(*corev1.Pod), true
		}
	}
	return nil, false
}

func (in *Intake) forget(p *corev1.Pod) {
	in.mu.Lock()
	delete(in.state, p.Namespace+"/"+p.Name)
	delete(in.uids, string(p.UID))
	in.mu.Unlock()
}

func (in *Intake) mine(p *corev1.Pod) bool {
	return wire.CollectorOf(p.Namespace, p.Name, max(in.cfg.Collectors, 1)) == in.cfg.Collector
}

// Run starts the watch (or the webhook intake's reconcile loop) and the senders.
func (in *Intake) Run(ctx context.Context) error {
	if in.cfg.Events {
		in.events = events.New(ctx, in.cfg.Client) // before any attempt can be requeued
	}
	if in.wh != nil {
		go in.reconcileLoop(ctx)
	}
	for _, f := range in.factories {
		f.Start(ctx.Done())
	}
	var synced []cache.InformerSynced
	for _, inf := range in.informers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); in.queue.ShutDown() }()
	if in.batcher != nil {
		go in.flushLoop(ctx)
	}
	var wg sync.WaitGroup
	for range in.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in.sendOne(ctx) {
			}
		}()
	}
	wg.Wait()
	return nil
}

// Pending is the number of pods this intake is still responsible for.
func (in *Intake) Pending() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.state)
}

func (in *Intake) sendOne(ctx context.Context) bool {
	k, quit := in.queue.Get()
	if quit {
		return false
	}
	defer in.queue.Done(k)
	pod, exists := in.get(k)
	in.mu.Lock()
	st := in.state[k]
	if !exists || st == nil {
		delete(in.state, k)
		in.mu.Unlock()
		in.groups.drop(k)
		return true
	}
	if pod.Spec.NodeName != "" || st.inflight || in.uids[string(pod.UID)] != k { // (UID: an older pod of that name)
		in.mu.Unlock()
		in.groups.drop(k)
		return true
	}
	h := wire.Header{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Attempt: st.attempt,
		Collector: in.cfg.Collector, SentNanos: time.Now().UnixNano()}
	group := ""
	if in.groups != nil {
		group = constraintGroup(pod)
	}
	if !in.groups.acquire(group, k, h.Key()) {
		in.mu.Unlock()
		in.m.Add("parked", 1) // another pod of its constraint group is in flight
		return true
	}
	st.inflight = true
	if group != "" {
		h.Placed = in.groups.placements()
	}
	unsched := st.unsched
	wide := st.wide || needsAllShards(pod)
	if in.batcher != nil && group == "" && unsched == 0 && !wide {
		if cls := batchClass(pod); cls != 0 {
			ready := in.batcher.add(cls, batchEntry{key: k, pod: pod, attempt: st.attempt})
			if ready == nil && in.queue.Len() == 0 {
				ready = in.batcher.flushAll(0) // nothing else is waiting: do not hold pods back
			}
			in.mu.Unlock()
			for _, b := range ready {
				if !in.sendBatch(ctx, b) {
					return false
				}
			}
			return true
		}
	}
	in.mu.Unlock()

	frame, err := wire.EncodeFrame(h, pod)
	if err != nil {
		in.m.Add("encode_errors", 1)
		in.groups.release(h.Key(), nil)
		return true
	}
	return in.scatter(ctx, frame, collector.Expectation{Key: h.Key(), Unsched: unsched, Sig: nodeConstraintSig(pod)}, wide, 1)
}

// scatter waits for an in-flight slot, registers the attempt with the collector and sends the
// frame: to the d shards the collector picks, or (wide, or --scatter all) down the relay tree.
func (in *Intake) scatter(ctx context.Context, frame []byte, e collector.Expectation, wide bool, pods int) bool {
	select { // wait for an in-flight slot (back-pressure from the gather stage)
	case in.window <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	in.mu.Lock()
	in.holding[e.Key] = true
	in.mu.Unlock()
	if !wide && in.cfg.Scatter > 0 && len(in.cfg.ShardSinks) > 0 {
		e.Targets = in.collector.PickShards(in.cfg.Scatter, e.Sig)
	}
	in.collector.ExpectScatter(e)
	in.m.Add("sent", int64(pods))
	if e.Key.Attempt > 0 {
		in.m.Add("resent", 1)
	}
	if e.Targets == nil {
		in.m.Add("scattered_all", 1)
		if err := in.cfg.Root.Send(ctx, frame); err != nil && ctx.Err() == nil {
			in.m.Add("send_errors", 1)
		}
		return true
	}
	in.m.Add("scattered_sampled", 1)
	for _, t := range e.Targets {
		if err := in.cfg.ShardSinks[t].Send(ctx, frame); err != nil && ctx.Err() == nil {
			in.m.Add("send_errors", 1)
		}
	}
	return true
}

// Requeue is the collector's collector.Config.Requeue: the attempt is over, try again later.
func (in *Intake) Requeue(key wire.AttemptKey, delay time.Duration, why string) {
	in.groups.release(key, nil)
	in.mu.Lock()
	name, ok := in.uids[key.UID]
	st := in.state[name]
	if !ok || st == nil || st.attempt != key.Attempt {
		in.mu.Unlock()
		return // bound/deleted meanwhile, or a stale attempt
	}
	st.attempt++
	st.inflight = false
	unschedulable := strings.HasPrefix(why, "unschedulable")
	if unschedulable {
		st.unsched++
	}
	if strings.HasPrefix(why, "widen") {
		st.wide = true
	}
	in.mu.Unlock()
	if unschedulable && in.events != nil {
		if pod, ok := in.get(name); ok {
			in.events.Failed(pod, strings.TrimPrefix(why, "unschedulable: "))
		}
	}
	in.m.Add("requeued", 1)
	if delay > 0 {
		in.queue.AddAfter(name, delay)
	} else {
		in.queue.Add(name)
	}
}

// Decided is the collector's collector.Config.Decided: the attempt frees its in-flight slot.
func (in *Intake) Decided(key wire.AttemptKey) {
	in.mu.Lock()
	held := in.holding[key]
	delete(in.holding, key)
	in.mu.Unlock()
	if held {
		<-in.window
	}
}

// Finished is the collector's collector.Config.Finished: the pod is bound (or gone).
func (in *Intake) Finished(key wire.AttemptKey, node string, bound bool) {
	if bound {
		in.groups.release(key, &wire.Placement{UID: key.UID, Attempt: key.Attempt, Node: node})
	} else {
		in.groups.release(key, nil)
	}
	in.mu.Lock()
	if name, ok := in.uids[key.UID]; ok {
		if st := in.state[name]; st != nil {
			in.m.Observe("schedule", time.Since(st.seen))
		}
	}
	in.mu.Unlock()
	if bound {
		in.m.Add("bound", 1)
	}
	if in.wh != nil {
		in.webhookFinished(key, bound) // no watch tells this intake the pod left: see webhook.go
	}
}
