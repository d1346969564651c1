package events

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/meganode/meganode/internal/scheduler/metrics"
)

// blockingSink counts the writes in progress and holds each until released.
type blockingSink struct {
	inFlight, most atomic.Int64
	gate           chan struct{}
	written        atomic.Int64
}

func (b *blockingSink) write() {
	n := b.inFlight.Add(1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-b.gate
	b.inFlight.Add(-1)
	b.written.Add(1)
}

func (b *blockingSink) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	b.write()
	return ev, nil
}

func (b *blockingSink) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	b.write()
	return ev, nil
}

func (b *blockingSink) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	b.write()
	return ev, nil
}

// At most inFlight events are written at once; the rest wait (none lost) until the waiting
// limit, past which new events are refused with a StatusError (which the broadcaster does not
// retry) and counted; series patches are never refused.
func TestDeferredSinkLimitsAndDrops(t *testing.T) {
	metrics.Reset()
	const inFlight, maxWaiting = 3, 5
	next := &blockingSink{gate: make(chan struct{})}
	s := newDeferredSink(next, inFlight, maxWaiting)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	start := func(patch bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if patch {
				_, err = s.Patch(ctx, &eventsv1.Event{}, nil)
			} else {
				_, err = s.Create(ctx, &eventsv1.Event{})
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for range inFlight + maxWaiting {
		start(false)
	}
	waitFor(t, func() bool { return next.inFlight.Load() == inFlight && s.Waiting() == maxWaiting })
	start(false) // one more create: refused
	select {
	case err := <-errs:
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("refused create: %v, want a TooManyRequests StatusError", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the create past the waiting limit was not refused")
	}
	start(true) // a series patch past the limit waits instead
	waitFor(t, func() bool { return s.Waiting() == maxWaiting+1 })
	close(next.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("unexpected error: %v", err)
	}
	if got, want := next.written.Load(), int64(inFlight+maxWaiting+1); got != want {
		t.Fatalf("written %d, want %d", got, want)
	}
	if m := next.most.Load(); m != inFlight {
		t.Fatalf("at most %d written at once, want %d", m, inFlight)
	}
	if d := metrics.Counter("events", "events_dropped_total"); d != 1 {
		t.Fatalf("dropped counter %d, want 1", d)
	}
}

// A stopping scheduler's waiting events return instead of hanging.
func TestDeferredSinkStops(t *testing.T) {
	next := &blockingSink{gate: make(chan struct{})}
	defer close(next.gate)
	s := newDeferredSink(next, 1, 10)
	go func() { _, _ = s.Create(context.Background(), &eventsv1.Event{}) }()
	waitFor(t, func() bool { return next.inFlight.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := s.Create(ctx, &eventsv1.Event{}); done <- err }()
	waitFor(t, func() bool { return s.Waiting() == 1 })
	cancel()
	select {
	case err := <-done:
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("got %v, want ServiceUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting event did not return when its context ended")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// While a Binding is in flight one event is written at a time; once none is, up to inFlight.
func TestDeferredSinkYieldsToBindings(t *testing.T) {
	const inFlight = 4
	next := &blockingSink{gate: make(chan struct{})}
	s := newDeferredSink(next, inFlight, 100)
	BindStarted()
	var wg sync.WaitGroup
	for range 2 * inFlight {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = s.Create(context.Background(), &eventsv1.Event{}) }()
	}
	waitFor(t, func() bool { return next.inFlight.Load() == 1 && s.Waiting() == 2*inFlight-1 })
	time.Sleep(20 * time.Millisecond)
	if n := next.inFlight.Load(); n != 1 {
		t.Fatalf("%d events written at once during a Binding, want 1", n)
	}
	BindDone()
	waitFor(t, func() bool { return next.inFlight.Load() == inFlight })
	close(next.gate)
	wg.Wait()
	if got := next.written.Load(); got != 2*inFlight {
		t.Fatalf("written %d, want %d", got, 2*inFlight)
	}
}
