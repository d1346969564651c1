package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/bench"
)

// A drain measures the scheduler's throughput and its CPU per pod: the scheduler is paused
// (SIGSTOP), every pod is created, the scheduler resumes (SIGCONT) and the time until the last
// pod is bound gives pods/s. Paced creation (CreatePods at --qps) cannot show throughput: its
// pods are scheduled as fast as they are created. The same trick as `scheduler bench`.

// DrainNamespace holds the drain's pods (apart from the paced pods of LoadNamespace).
const DrainNamespace = "meganode-drain"

// DrainRun is what a drain measured.
type DrainRun struct {
	Pods       int     `json:"pods"`
	Bound      int     `json:"bound"`
	Scheduler  string  `json:"scheduler"` // the component paused and measured
	Seconds    float64 `json:"seconds"`   // SIGCONT → the last pod bound
	PodsPerSec float64 `json:"pods_per_sec"`
	// SchedulerCPUSeconds is the scheduler process's user+system CPU from SIGCONT to the last
	// pod bound (/proc/<pid>/stat); CPUMsPerPod divides it by the pods.
	SchedulerCPUSeconds float64 `json:"scheduler_cpu_seconds"`
	CPUMsPerPod         float64 `json:"scheduler_cpu_ms_per_pod"`
}

// SchedulerComponent is the cluster's scheduler process (kube-scheduler or meganode-scheduler).
func (s *State) SchedulerComponent() *Component {
	for i := range s.Components {
		if c := &s.Components[i]; c.Kind == BinScheduler || c.Kind == KindMeganodeScheduler {
			return c
		}
	}
	return nil
}

// DrainPods runs one drain of n pods in DrainNamespace and leaves the pods in place.
func DrainPods(ctx context.Context, st *State, n int, timeout time.Duration, prog *bench.Progress) (*DrainRun, error) {
	sched := st.SchedulerComponent()
	if sched == nil || !sched.Alive() {
		return nil, fmt.Errorf("drain: no running scheduler in %s", st.Dir)
	}
	cs, err := Clientset(st)
	if err != nil {
		return nil, err
	}
	if err := EnsureNamespace(ctx, cs, DrainNamespace); err != nil {
		return nil, err
	}
	res := &DrainRun{Pods: n, Scheduler: sched.Name}
	if err := syscall.Kill(sched.Pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("drain: pause %s: %w", sched.Name, err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(sched.Pid, syscall.SIGCONT)
		}
	}()
	prog.Phase(fmt.Sprintf("drain: creating %d pods with %s paused…", n, sched.Name))
	if err := createUnscheduled(ctx, cs, n); err != nil {
		return nil, err
	}
	w, err := startBoundCount(ctx, cs)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	before, err := bench.ReadProc(sched.Pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := syscall.Kill(sched.Pid, syscall.SIGCONT); err != nil {
		return nil, err
	}
	resumed = true
	prog.Start(fmt.Sprintf("drain: %d pods → bound", n), int64(n), 0, w.bound.Load)
	werr := w.wait(ctx, n, timeout)
	prog.Done()
	res.Seconds = time.Since(t0).Seconds()
	after, perr := bench.ReadProc(sched.Pid)
	res.Bound = int(w.bound.Load())
	if werr != nil {
		return res, fmt.Errorf("drain: %d of %d pods bound: %w", res.Bound, n, werr)
	}
	if perr != nil {
		return res, fmt.Errorf("drain: reading %s's CPU: %w", sched.Name, perr)
	}
	res.PodsPerSec = float64(n) / res.Seconds
	res.SchedulerCPUSeconds = (after.CPUMicros() - before.CPUMicros()) / 1e6
	res.CPUMsPerPod = res.SchedulerCPUSeconds * 1e3 / float64(n)
	return res, nil
}

// createUnscheduled creates n load pods in DrainNamespace as fast as 32 clients can.
func createUnscheduled(ctx context.Context, cs kubernetes.Interface, n int) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var first atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := PodObject(DrainNamespace, fmt.Sprintf("%s-drain-%06d", LoadName, i), "drain")
				if _, err := cs.CoreV1().Pods(DrainNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return fmt.Errorf("drain: creating pods: %w", err)
	}
	return ctx.Err()
}

// boundCount counts the bound pods of DrainNamespace from a LIST and then a watch (no polling
// LISTs: those would take apiserver CPU from the scheduler being measured). A watch can end
// under it — the plan's --goaway-chance closes connections now and then — so it lists and
// watches again until stopped.
type boundCount struct {
	bound  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func startBoundCount(ctx context.Context, cs kubernetes.Interface) (*boundCount, error) {
	pods := cs.CoreV1().Pods(DrainNamespace)
	pl, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	b := &boundCount{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for wctx.Err() == nil {
			seen := map[string]bool{}
			for _, p := range pl.Items {
				if p.Spec.NodeName != "" {
					seen[p.Name] = true
				}
			}
			b.bound.Store(int64(len(seen)))
			if wi, err := pods.Watch(wctx, metav1.ListOptions{ResourceVersion: pl.ResourceVersion}); err == nil {
				for ev := range wi.ResultChan() {
					p, ok := ev.Object.(*corev1.Pod)
					if ok && p.Spec.NodeName != "" && !seen[p.Name] {
						seen[p.Name] = true
						b.bound.Add(1)
					}
				}
				wi.Stop()
			}
			for wctx.Err() == nil { // the watch ended (or never started): list again
				if pl, err = pods.List(wctx, metav1.ListOptions{}); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return b, nil
}

func (b *boundCount) stop() {
	b.cancel()
	<-b.done
}

// wait returns once n pods are bound or timeout passes.
func (b *boundCount) wait(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for b.bound.Load() < int64(n) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("not within %s", timeout)
		case <-tk.C:
		}
	}
	return nil
}
