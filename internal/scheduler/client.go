package scheduler

import (
	"net/http"
)

// RequestsInFlight bounds the scheduler's requests to the apiserver other than watches. Go's
// HTTP/2 client keeps one connection per apiserver and, when every stream the server allows on
// it is taken, dials a new TLS connection for each request that waits — most of which it then
// closes unused once a stream frees up. kube-apiserver allows 100 streams per connection by
// default (--http2-max-streams-per-connection 0), and a shard has up to --bind-workers (256)
// Bindings plus one Event per bound pod in flight (client-go's event broadcaster writes each
// on a goroutine of its own) beside its informers' watches, each a stream held for minutes.
// With the requests bounded well below the stream limit (the watches stay outside the bound)
// the one connection carries everything and the requests past the bound wait here for a slot
// instead of on a new connection.
const RequestsInFlight = 32

// inFlightLimit is the RoundTripper that applies RequestsInFlight.
type inFlightLimit struct {
	next  http.RoundTripper
	slots chan struct{}
}

func newInFlightLimit(next http.RoundTripper, n int) *inFlightLimit {
	return &inFlightLimit{next: next, slots: make(chan struct{}, n)}
}

func (l *inFlightLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		return l.next.RoundTrip(req) // a watch holds its stream for minutes: never in the bound
	}
	select {
	case l.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	resp, err := l.next.RoundTrip(req)
	// The slot is the stream: it is free once the response is answered — the requests bounded
	// here (Bindings, Events, Gets, Lists) are read to the end by client-go right away.
	<-l.slots
	return resp, err
}
