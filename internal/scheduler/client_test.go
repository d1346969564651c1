package scheduler

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// blockingRT answers once release is closed and records the most requests it held at once.
type blockingRT struct {
	release       chan struct{}
	now, maxSoFar atomic.Int64
}

func (b *blockingRT) RoundTrip(*http.Request) (*http.Response, error) {
	n := b.now.Add(1)
	for m := b.maxSoFar.Load(); n > m && !b.maxSoFar.CompareAndSwap(m, n); m = b.maxSoFar.Load() {
	}
	<-b.release
	b.now.Add(-1)
	return &http.Response{StatusCode: 200}, nil
}

// At most n requests other than watches reach the transport at once; watches are never held
// back (each holds a stream for minutes, and a bound counting them would stall the informers).
func TestInFlightLimitBoundsRequestsNotWatches(t *testing.T) {
	rt := &blockingRT{release: make(chan struct{})}
	l := newInFlightLimit(rt, 3)
	done := make(chan struct{}, 20)
	send := func(url string) {
		req, _ := http.NewRequest("POST", url, nil)
		go func() { _, _ = l.RoundTrip(req); done <- struct{}{} }()
	}
	for range 10 {
		send("https://apiserver/api/v1/namespaces/a/pods/p/binding")
	}
	for range 5 {
		send("https://apiserver/api/v1/pods?watch=true&resourceVersion=1")
	}
	deadline := time.Now().Add(5 * time.Second)
	for rt.now.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := rt.now.Load(); n != 8 {
		t.Fatalf("%d requests at the transport, want 3 bounded + 5 watches", n)
	}
	close(rt.release)
	for range 15 {
		<-done
	}
	if m := rt.maxSoFar.Load(); m != 8 {
		t.Fatalf("at most %d at once, want 8", m)
	}
}
