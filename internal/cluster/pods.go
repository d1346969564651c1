package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"golang.org/x/time/rate"

	"github.com/meganode/meganode/internal/bench"
)

// Load namespace and labels.
const (
	LoadNamespace = "meganode-load"
	LoadLabel     = "meganode.io/load"
	LoadName      = "meganode-load"
)

// PodOptions describe a batch of pods.
type PodOptions struct {
	Namespace   string
	Count       int
	Deployment  bool    // one Deployment of Count replicas, created by the controller-manager
	Concurrency int     // parallel creates (direct mode); default 32
	QPS         float64 // creates per second (direct mode); 0 = as fast as the apiserver takes them
	Timeout     time.Duration
	Progress    *bench.Progress
	// SchedulerName sets spec.schedulerName ("" = the default scheduler; "meganode" for `up --scheduler meganode`).
	SchedulerName string
	// Requests, direct mode: the requests of pod i (nil = PodObject's 50m CPU, 64Mi).
	Requests func(i int) corev1.ResourceList
	// UntilScheduled: wait until every pod has a node, not until every pod runs (the
	// reference's procedure; KWOK's Running status follows on its own).
	UntilScheduled bool
}

// PodRun is what a pod batch measured through a watch.
type PodRun struct {
	Count           int             `json:"count"`
	QPS             float64         `json:"create_qps,omitempty"`
	Mode            string          `json:"mode"`
	Scheduled       int             `json:"scheduled"`
	Running         int             `json:"running"`
	Start           time.Time       `json:"start"`
	End             time.Time       `json:"end"`
	CreateSeconds   float64         `json:"create_seconds"` // until the last create returned (direct mode)
	ScheduledPerSec float64         `json:"scheduled_per_sec"`
	Startup         bench.Latency   `json:"startup_latency"`  // creation → Running, as observed through a watch
	Schedule        bench.Latency   `json:"schedule_latency"` // creation → bound to a node
	StartupP99Sec   float64         `json:"startup_p99_seconds"`
	Timeline        []TimelinePoint `json:"timeline"`
	CreateErrors    int             `json:"create_errors"`

	startupH, scheduleH *bench.Histogram
}

// TimelinePoint counts pods at a moment of the run.
type TimelinePoint struct {
	Seconds   float64 `json:"t"`
	Created   int     `json:"created"`
	Scheduled int     `json:"scheduled"`
	Running   int     `json:"running"`
}

type podTimes struct{ created, scheduled, running time.Time }

// PodObject is a small pod (a pause container, modest requests) for KWOK nodes.
func PodObject(ns, name, run string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LoadLabel: run, "app": LoadName}},
		Spec:       podSpec(),
	}
}

func podSpec() corev1.PodSpec {
	zero := int64(0)
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		}},
		NodeSelector:                  map[string]string{"type": "kwok"},
		TerminationGracePeriodSeconds: &zero,
	}
}

func withScheduler(s corev1.PodSpec, name string) corev1.PodSpec {
	s.SchedulerName = name
	return s
}

// EnsureNamespace creates ns if needed and waits for its default ServiceAccount (the
// ServiceAccount admission plugin refuses pods until the controller-manager made it).
func EnsureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: no default ServiceAccount after 90s (is the controller-manager running?): %w", ns, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreatePods creates o.Count pods (directly, or through a Deployment) and watches them until all
// run, measuring pod startup latency (creation → Running) and scheduling throughput.
func CreatePods(ctx context.Context, cs kubernetes.Interface, o PodOptions) (*PodRun, error) {
	if o.Namespace == "" {
		o.Namespace = LoadNamespace
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if err := EnsureNamespace(ctx, cs, o.Namespace); err != nil {
		return nil, err
	}
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)
	res := &PodRun{Count: o.Count, Mode: "pods", QPS: o.QPS, startupH: bench.NewHistogram(), scheduleH: bench.NewHistogram()}
	if o.Deployment {
		res.Mode = "deployment"
	}

	var mu sync.Mutex
	times := map[string]*podTimes{}
	var nCreated, nScheduled, nRunning atomic.Int64
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		t := times[p.Name]
		if t == nil {
			t = &podTimes{created: now} // deployment mode: first seen ≈ created
			times[p.Name] = t
		}
		if t.scheduled.IsZero() && p.Spec.NodeName != "" {
			t.scheduled = now
			nScheduled.Add(1)
			res.scheduleH.Record(now.Sub(t.created))
		}
		if t.running.IsZero() && p.Status.Phase == corev1.PodRunning {
			t.running = now
			nRunning.Add(1)
			res.startupH.Record(now.Sub(t.created))
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = LoadLabel + "=" + run }))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, n any) { observe(n) },
	})
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	f.Start(ictx.Done())
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod watch did not sync")
	}

	res.Start = time.Now()
	stopTL := make(chan struct{})
	tlDone := make(chan struct{})
	go func() { // timeline, one point a second
		defer close(tlDone)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopTL:
				return
			case now := <-tk.C:
				mu.Lock()
				c := len(times)
				mu.Unlock()
				if !o.Deployment {
					c = int(nCreated.Load())
				}
				res.Timeline = append(res.Timeline, TimelinePoint{Seconds: now.Sub(res.Start).Seconds(), Created: c,
					Scheduled: int(nScheduled.Load()), Running: int(nRunning.Load())})
			}
		}
	}()
	until, untilWhat := &nRunning, "Running"
	if o.UntilScheduled {
		until, untilWhat = &nScheduled, "a node"
	}
	o.Progress.Start(fmt.Sprintf("%d pods → %s", o.Count, untilWhat), int64(o.Count), 0, until.Load)
	var createErr error
	if o.Deployment {
		replicas := int32(o.Count)
		lbl := map[string]string{LoadLabel: run, "app": LoadName}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: LoadName + "-" + run, Namespace: o.Namespace, Labels: lbl},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: withScheduler(podSpec(), o.SchedulerName)}},
		}
		_, createErr = cs.AppsV1().Deployments(o.Namespace).Create(ctx, d, metav1.CreateOptions{})
		res.CreateSeconds = time.Since(res.Start).Seconds()
	} else {
		idx := make(chan int)
		var lim *rate.Limiter
		if o.QPS > 0 {
			lim = rate.NewLimiter(rate.Limit(o.QPS), 1)
		}
		var wg sync.WaitGroup
		var errs atomic.Int64
		var firstErr atomic.Value
		for w := 0; w < o.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range idx {
					if lim != nil && lim.Wait(ctx) != nil {
						continue
					}
					name := fmt.Sprintf("%s-%s-%06d", LoadName, run, i)
					mu.Lock()
					times[name] = &podTimes{created: time.Now()}
					mu.Unlock()
					var err error
					for attempt := 0; attempt < 5; attempt++ {
						p := PodObject(o.Namespace, name, run)
						p.Spec = withScheduler(p.Spec, o.SchedulerName)
						if o.Requests != nil {
							p.Spec.Containers[0].Resources.Requests = o.Requests(i)
						}
						_, err = cs.CoreV1().Pods(o.Namespace).Create(ctx, p, metav1.CreateOptions{})
						if err == nil || apierrors.IsAlreadyExists(err) {
							err = nil
							break
						}
						time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
					}
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err)
					} else {
						nCreated.Add(1)
					}
				}
			}()
		}
		for i := 0; i < o.Count && ctx.Err() == nil; i++ {
			idx <- i
		}
		close(idx)
		wg.Wait()
		res.CreateSeconds = time.Since(res.Start).Seconds()
		res.CreateErrors = int(errs.Load())
		if e, ok := firstErr.Load().(error); ok {
			createErr = fmt.Errorf("%d pod creates failed, first: %w", errs.Load(), e)
		}
	}
	// Wait until every pod runs (UntilScheduled: has a node).
	deadline := time.Now().Add(o.Timeout)
	for createErr == nil && int(until.Load()) < o.Count && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	o.Progress.Done()
	close(stopTL)
	<-tlDone
	res.End = time.Now()
	res.Scheduled, res.Running = int(nScheduled.Load()), int(nRunning.Load())
	res.Startup, res.Schedule = res.startupH.Summary(), res.scheduleH.Summary()
	res.StartupP99Sec = res.startupH.Quantile(0.99).Seconds()
	// Scheduling throughput: pods bound per second between the first create and the last binding.
	var last time.Time
	mu.Lock()
	var sched []time.Time
	for _, t := range times {
		if !t.scheduled.IsZero() {
			sched = append(sched, t.scheduled)
		}
	}
	mu.Unlock()
	sort.Slice(sched, func(i, j int) bool { return sched[i].Before(sched[j]) })
	if len(sched) > 0 {
		last = sched[len(sched)-1]
		if d := last.Sub(res.Start).Seconds(); d > 0 {
			res.ScheduledPerSec = float64(len(sched)) / d
		}
	}
	if createErr != nil {
		return res, createErr
	}
	if o.UntilScheduled && res.Scheduled < o.Count {
		return res, fmt.Errorf("%d of %d pods had a node after %s", res.Scheduled, o.Count, o.Timeout)
	}
	if !o.UntilScheduled && res.Running < o.Count {
		return res, fmt.Errorf("%d of %d pods Running after %s (%d scheduled)", res.Running, o.Count, o.Timeout, res.Scheduled)
	}
	return res, nil
}

// DeletePods deletes every load Deployment and pod in ns and waits until the pods are gone.
func DeletePods(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration, prog *bench.Progress) (int, error) {
	if ns == "" {
		ns = LoadNamespace
	}
	sel := metav1.ListOptions{LabelSelector: "app=" + LoadName}
	bg := metav1.DeletePropagationBackground
	if err := cs.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, sel); err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector, ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	total := len(l.Items)
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel); err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	var gone atomic.Int64
	prog.Start(fmt.Sprintf("deleting %d pods", total), int64(total), 0, gone.Load)
	defer prog.Done()
	deadline := time.Now().Add(timeout)
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector, ResourceVersion: "0"})
		if err == nil {
			gone.Store(int64(total - len(l.Items)))
			if len(l.Items) == 0 {
				return total, nil
			}
		}
		if time.Now().After(deadline) {
			return total, fmt.Errorf("%d pods still present after %s", len(l.Items), timeout)
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
