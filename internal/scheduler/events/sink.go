package events

import (
	"context"
	"sync"
	"sync/atomic"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sevents "k8s.io/client-go/tools/events"

	"github.com/meganode/meganode/internal/scheduler/metrics"
)

// Binds first, events behind them. A pod on its node is the scheduler's job; its Event is
// information about it, and Kubernetes treats events as best effort (client-go's own recorder
// drops them when its queue is full). Written as the broadcaster writes them — each on a
// goroutine of its own, as many at once as there are events — they take half of the
// apiserver's writes while pods are being bound: on the 2-core 5K-node cluster the apiserver
// takes ≈1,000–1,200 writes/s whichever they are, so a scheduler writing an Event per Binding
// binds at most half of that (internal/scheduler/NOTES.md, "Bindings + Events ceiling").
// The sink writes one event at a time while any Binding of this process is being written
// (BindStarted/BindDone, around the bind plugins) and up to InFlight at once otherwise; the
// others wait their turn, so during a burst the Bindings get the apiserver and the events follow
// as it frees up (on the 5K cluster with 16 at once throughout, a third of the events still went
// out during the drain: NOTES.md). Past MaxWaiting
// waiting events (a burst the apiserver has not caught up with) a new Scheduled or
// FailedScheduling event is dropped and counted (meganode_scheduler_events_dropped_total),
// rather than held in memory without bound.
const (
	InFlight   = 16
	MaxWaiting = 50_000
)

// deferredSink limits the events being written at once; see above.
type deferredSink struct {
	next     k8sevents.EventSink
	lane     chan struct{} // one event at a time, always open
	slots    chan struct{} // InFlight-1 more while no Binding is being written
	waiting  atomic.Int64
	max      int64
	counters *metrics.Counters
}

func newDeferredSink(next k8sevents.EventSink, inFlight int, maxWaiting int64) *deferredSink {
	return &deferredSink{next: next, lane: make(chan struct{}, 1), slots: make(chan struct{}, max(inFlight-1, 0)), max: maxWaiting,
		counters: metrics.For("events")}
}

// acquire waits for a slot. A new event (create) is refused past the waiting limit; a series
// update (patch, update) of an event already written always waits — dropping it would leave
// its series count wrong, and there is at most one per repeated event.
func (s *deferredSink) acquire(ctx context.Context, droppable bool) (release func(), err error) {
	if n := s.waiting.Add(1); droppable && n > s.max {
		s.waiting.Add(-1)
		s.counters.Add("events_dropped_total", 1)
		// A StatusError: the broadcaster logs it and does not retry (a plain error would be
		// retried 12 times, 10 s apart, which is the backlog this limit exists to avoid).
		return nil, apierrors.NewTooManyRequests("meganode scheduler: more than the event backlog limit waiting behind Bindings; event dropped", 0)
	}
	defer s.waiting.Add(-1)
	stopping := apierrors.NewServiceUnavailable("meganode scheduler: stopping; event not written")
	fromLane := func() { <-s.lane; s.counters.Add("events_written_total", 1) }
	fromSlots := func() { <-s.slots; s.counters.Add("events_written_total", 1) }
	select {
	case s.lane <- struct{}{}:
		return fromLane, nil
	case <-bindsIdle():
		select {
		case s.lane <- struct{}{}:
			return fromLane, nil
		case s.slots <- struct{}{}:
			return fromSlots, nil
		case <-ctx.Done():
			return nil, stopping
		}
	case <-ctx.Done():
		return nil, stopping
	}
}

func (s *deferredSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	release, err := s.acquire(ctx, true)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.next.Create(ctx, ev)
}

func (s *deferredSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	release, err := s.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.next.Update(ctx, ev)
}

func (s *deferredSink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	release, err := s.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.next.Patch(ctx, old, data)
}

// Waiting is the number of events waiting for a slot (tests, /metrics readers).
func (s *deferredSink) Waiting() int64 { return s.waiting.Load() }

// The process's Bindings in flight: events yield to them (above). idle is closed while none is.
var binds struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

func init() {
	binds.idle = make(chan struct{})
	close(binds.idle)
}

// BindStarted and BindDone bracket one Binding's write (the shard's bind plugins).
func BindStarted() {
	binds.mu.Lock()
	if binds.n == 0 {
		binds.idle = make(chan struct{})
	}
	binds.n++
	binds.mu.Unlock()
}

// BindDone: see BindStarted.
func BindDone() {
	binds.mu.Lock()
	if binds.n--; binds.n == 0 {
		close(binds.idle)
	}
	binds.mu.Unlock()
}

// bindsIdle is closed once no Binding is in flight (at once if none is now).
func bindsIdle() <-chan struct{} {
	binds.mu.Lock()
	defer binds.mu.Unlock()
	return binds.idle
}
