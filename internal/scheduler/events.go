package scheduler

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// Scheduling events, as kube-scheduler records them (events.k8s.io/v1, reportingController =
// the pod's scheduler name, like kube-scheduler's one recorder per profile):
//   - Normal  Scheduled        "Successfully assigned <ns>/<name> to <node>" — by the shard that
//     bound the pod, after Bind succeeded;
//   - Warning FailedScheduling "<reason>" — by the collector's intake when an attempt ends with no
//     feasible node (one per attempt, as kube-scheduler records one per failed cycle; the
//     broadcaster folds repeats into a series).
//
// `kubectl describe pod` and tools that wait on these events work unchanged. They cost the
// apiserver one write per pod, which the stock scheduler pays too; benchmarks compare like
// with like. The recording itself is asynchronous (the broadcaster's queue), off the hot path.
type eventRecorders struct {
	b      events.EventBroadcaster
	mu     sync.Mutex
	byName map[string]events.EventRecorderLogger
}

// newEventRecorders starts a broadcaster writing to cs; nil cs: no events (simulator, tests
// that opt out), and every method is a no-op on the nil result.
func newEventRecorders(ctx context.Context, cs kubernetes.Interface) *eventRecorders {
	if cs == nil {
		return nil
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
	return &eventRecorders{b: b, byName: map[string]events.EventRecorderLogger{}}
}

func (r *eventRecorders) recorder(schedulerName string) events.EventRecorderLogger {
	if schedulerName == "" {
		schedulerName = corev1.DefaultSchedulerName
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.byName[schedulerName]
	if !ok {
		rec = r.b.NewRecorder(scheme.Scheme, schedulerName)
		r.byName[schedulerName] = rec
	}
	return rec
}

// scheduled records that pod (the assumed copy is fine: only its reference is used) was bound.
func (r *eventRecorders) scheduled(pod *corev1.Pod, node string) {
	if r == nil {
		return
	}
	r.recorder(pod.Spec.SchedulerName).Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding",
		"Successfully assigned %v/%v to %v", pod.Namespace, pod.Name, node)
}

// failed records an attempt that found no node.
func (r *eventRecorders) failed(pod *corev1.Pod, why string) {
	if r == nil {
		return
	}
	r.recorder(pod.Spec.SchedulerName).Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "%s", why)
}
