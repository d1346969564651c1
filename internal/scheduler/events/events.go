// Package events records kube-scheduler's scheduling events for the meganode scheduler: shards
// record Scheduled when they bind, intakes FailedScheduling when an attempt found no node. Both
// roles record them, so the recorders are a package of their own below both.
package events

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	k8sevents "k8s.io/client-go/tools/events"
)

// Recorders record the scheduling events as kube-scheduler does (events.k8s.io/v1,
// reportingController = the pod's scheduler name: one recorder per name, like kube-scheduler's
// one per profile):
//   - Normal  Scheduled        "Successfully assigned <ns>/<name> to <node>" — by the shard that
//     bound the pod, after Bind succeeded;
//   - Warning FailedScheduling "<reason>" — by the collector's intake when an attempt ends with no
//     feasible node (one per attempt, as kube-scheduler records one per failed cycle; the
//     broadcaster folds repeats into a series).
//
// `kubectl describe pod` and tools that wait on these events work unchanged. They cost the
// apiserver one write per pod, which the stock scheduler pays too; benchmarks compare like
// with like. The recording itself is asynchronous (the broadcaster's queue), off the hot path.
type Recorders struct {
	b      k8sevents.EventBroadcaster
	mu     sync.Mutex
	byName map[string]k8sevents.EventRecorderLogger
}

// New starts a broadcaster writing to cs; nil cs: no events (simulator, tests that opt out),
// and every method is a no-op on the nil result.
func New(ctx context.Context, cs kubernetes.Interface) *Recorders {
	if cs == nil {
		return nil
	}
	b := k8sevents.NewBroadcaster(&k8sevents.EventSinkImpl{Interface: cs.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
	return &Recorders{b: b, byName: map[string]k8sevents.EventRecorderLogger{}}
}

func (r *Recorders) recorder(schedulerName string) k8sevents.EventRecorderLogger {
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

// Scheduled records that pod (the assumed copy is fine: only its reference is used) was bound.
func (r *Recorders) Scheduled(pod *corev1.Pod, node string) {
	if r == nil {
		return
	}
	r.recorder(pod.Spec.SchedulerName).Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding",
		"Successfully assigned %v/%v to %v", pod.Namespace, pod.Name, node)
}

// Failed records an attempt that found no node.
func (r *Recorders) Failed(pod *corev1.Pod, why string) {
	if r == nil {
		return
	}
	r.recorder(pod.Spec.SchedulerName).Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "%s", why)
}
