package etcdproxy

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/protoadapt"
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	Endpoint string        // host:port or http://host:port of a fresh (empty) store
	Timeout  time.Duration // per call and per wait for watch events; default 10 s
}

// Mismatch is one response that differs from the recorded one.
type Mismatch struct {
	Stream   uint64 `json:"stream"`
	Method   string `json:"method"`
	Revision int64  `json:"revision"` // where in the order it was replayed
	Reason   string `json:"reason"`
	Recorded string `json:"recorded"`
	Replayed string `json:"replayed"`
}

func (m Mismatch) String() string {
	return fmt.Sprintf("stream %d %s at revision %d: %s\n    recorded: %s\n    replayed: %s", m.Stream, m.Method, m.Revision, m.Reason, m.Recorded, m.Replayed)
}

// MethodCount counts the replayed calls of one method.
type MethodCount struct {
	Replayed   int `json:"replayed"`
	Mismatched int `json:"mismatched"`
}

// Summary is what Replay found.
type Summary struct {
	Lines        int                     `json:"lines"`
	Calls        map[string]*MethodCount `json:"calls"`   // unary calls and watch creates, by method
	Skipped      map[string]int          `json:"skipped"` // streams and calls not replayed, by method
	WatchStreams int                     `json:"watch_streams"`
	WatchCreates int                     `json:"watch_creates"`
	WatchEvents  int                     `json:"watch_events"` // recorded events compared
	MaxRevision  int64                   `json:"max_revision"`
	RevisionGaps []int64                 `json:"revision_gaps,omitempty"` // revisions no recorded write made
	Mismatches   []Mismatch              `json:"mismatches"`
	Elapsed      time.Duration           `json:"elapsed"`
}

// Replayed is the number of calls sent (unary calls and watch creates).
func (s *Summary) Replayed() int {
	n := 0
	for _, c := range s.Calls {
		n += c.Replayed
	}
	return n
}

// Print writes the summary and up to maxShown mismatches.
func (s *Summary) Print(w io.Writer, maxShown int) {
	fmt.Fprintf(w, "replayed %d calls from %d recorded lines in %.1fs (recorded up to revision %d)\n", s.Replayed(), s.Lines, s.Elapsed.Seconds(), s.MaxRevision)
	names := make([]string, 0, len(s.Calls))
	for n := range s.Calls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := s.Calls[n]
		fmt.Fprintf(w, "  %-40s %6d replayed %6d mismatched\n", n, c.Replayed, c.Mismatched)
	}
	fmt.Fprintf(w, "  watches: %d streams, %d creates, %d recorded events compared\n", s.WatchStreams, s.WatchCreates, s.WatchEvents)
	if len(s.Skipped) > 0 {
		var sk []string
		for n, c := range s.Skipped {
			sk = append(sk, fmt.Sprintf("%s %d", n, c))
		}
		sort.Strings(sk)
		fmt.Fprintf(w, "  not replayed: %s\n", strings.Join(sk, ", "))
	}
	if len(s.RevisionGaps) > 0 {
		fmt.Fprintf(w, "  WARNING: %d revisions were made by writes the proxy did not see (lease expiry, another client, a store that was not empty), first %d: revisions after it cannot match\n",
			len(s.RevisionGaps), s.RevisionGaps[0])
	}
	fmt.Fprintf(w, "mismatches: %d\n", len(s.Mismatches))
	for i, m := range s.Mismatches {
		if i == maxShown {
			fmt.Fprintf(w, "  … %d more\n", len(s.Mismatches)-maxShown)
			break
		}
		fmt.Fprintf(w, "  #%d %s\n", i+1, m)
	}
}

type call struct {
	id     uint64
	method string
	lines  []int // indexes into the recording
}

const (
	opUnary = iota
	opWatch
)

type op struct {
	rev   int64
	class int // 0: the write that made rev; 1: everything that saw rev
	seq   int // line index of the request
	kind  int
	call  *call
	req   protoadapt.MessageV1
	resp  protoadapt.MessageV1 // recorded response (nil with rerr)
	rerr  *LineError
	wreq  *pb.WatchRequest
	wresp *pb.WatchResponse // recorded created response of a create
}

type recWatchKey struct {
	stream uint64
	id     int64
}

// Replay sends the unary calls and watch requests of a recording to a fresh store in the order
// the recorded store applied them (by response revision) and compares the responses.
func Replay(ctx context.Context, lines []Line, opt ReplayOptions) (*Summary, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	began := time.Now()
	sum := &Summary{Lines: len(lines), Calls: map[string]*MethodCount{}, Skipped: map[string]int{}}
	count := func(method string) *MethodCount {
		c := sum.Calls[method]
		if c == nil {
			c = &MethodCount{}
			sum.Calls[method] = c
		}
		return c
	}

	// Group lines by stream and note the highest revision seen so far at every line.
	calls := map[uint64]*call{}
	var order []*call
	seen := make([]int64, len(lines))
	var maxRev int64
	parsedResp := map[int]protoadapt.MessageV1{}
	for i, l := range lines {
		c := calls[l.Stream]
		if c == nil {
			c = &call{id: l.Stream, method: l.Method}
			calls[l.Stream] = c
			order = append(order, c)
		}
		c.lines = append(c.lines, i)
		if l.Dir == DirResp && len(l.Msg) > 0 {
			var m protoadapt.MessageV1
			if l.Method == MethodWatch {
				m = &pb.WatchResponse{}
			} else if _, m = newMessage(l.Method); m == nil {
				seen[i] = maxRev
				continue
			}
			if err := unmarshal(l.Msg, m); err != nil {
				return nil, fmt.Errorf("line %d (%s): %w", i+1, l.Method, err)
			}
			parsedResp[i] = m
			if r := headerRevision(m); r > maxRev {
				maxRev = r
			}
		}
		seen[i] = maxRev
	}
	sum.MaxRevision = maxRev

	// Build the operations.
	var ops []*op
	recEvents := map[recWatchKey][]*mvccpb.Event{}
	for _, c := range order {
		switch {
		case c.method == MethodWatch:
			sum.WatchStreams++
			var created []*pb.WatchResponse
			for _, i := range c.lines {
				if r, ok := parsedResp[i].(*pb.WatchResponse); ok {
					if r.Created {
						created = append(created, r)
					}
					if len(r.Events) > 0 {
						k := recWatchKey{c.id, r.WatchId}
						recEvents[k] = append(recEvents[k], r.Events...)
					}
				}
			}
			k := 0
			for _, i := range c.lines {
				l := lines[i]
				if l.Dir != DirReq {
					continue
				}
				wr := &pb.WatchRequest{}
				if err := unmarshal(l.Msg, wr); err != nil {
					return nil, fmt.Errorf("line %d: %w", i+1, err)
				}
				o := &op{rev: seen[i], class: 1, seq: i, kind: opWatch, call: c, wreq: wr}
				if wr.GetCreateRequest() != nil {
					if k < len(created) {
						o.wresp = created[k]
						if r := headerRevision(created[k]); r > 0 {
							o.rev = r
						}
					}
					k++
				}
				ops = append(ops, o)
			}
		default:
			req, _ := newMessage(c.method)
			if req == nil {
				sum.Skipped[short(c.method)]++
				continue
			}
			var reqLine, respLine = -1, -1
			for _, i := range c.lines {
				switch lines[i].Dir {
				case DirReq:
					reqLine = i
				case DirResp:
					respLine = i
				}
			}
			if reqLine < 0 || respLine < 0 {
				sum.Skipped[short(c.method)+" (no recorded response)"]++
				continue
			}
			if err := unmarshal(lines[reqLine].Msg, req); err != nil {
				return nil, fmt.Errorf("line %d: %w", reqLine+1, err)
			}
			o := &op{rev: seen[respLine], class: 1, seq: reqLine, kind: opUnary, call: c, req: req}
			if e := lines[respLine].Error; e != nil {
				o.rerr = e
			} else {
				o.resp = parsedResp[respLine]
				o.rev = headerRevision(o.resp)
			}
			ops = append(ops, o)
		}
	}
	// The write that made each revision comes before everything that saw it.
	writer := map[int64]bool{}
	for _, o := range ops {
		if o.kind == opUnary && o.resp != nil && writesRevision(o.resp) && !writer[o.rev] {
			writer[o.rev] = true
			o.class = 0
		}
	}
	for _, o := range ops { // a revoke of a lease with keys makes a revision too
		if o.kind == opUnary && o.call.method == MethodLeaseRevoke && o.resp != nil && !writer[o.rev] && o.rev > 1 {
			writer[o.rev] = true
			o.class = 0
		}
	}
	for r := int64(2); r <= maxRev; r++ {
		if !writer[r] {
			sum.RevisionGaps = append(sum.RevisionGaps, r)
		}
	}
	slices.SortStableFunc(ops, func(a, b *op) int {
		return cmp.Or(cmp.Compare(a.rev, b.rev), cmp.Compare(a.class, b.class), cmp.Compare(a.seq, b.seq))
	})

	// Replay.
	target := strings.TrimPrefix(strings.TrimPrefix(opt.Endpoint, "http://"), "https://")
	conn, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leases := newLeaseMap()
	watches := map[uint64]*replayWatch{}
	mismatch := func(o *op, reason string, rec, rep protoadapt.MessageV1) {
		count(o.call.method).Mismatched++
		sum.Mismatches = append(sum.Mismatches, Mismatch{Stream: o.call.id, Method: o.call.method, Revision: o.rev,
			Reason: reason, Recorded: show(rec, 800), Replayed: show(rep, 800)})
	}
	for _, o := range ops {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		switch o.kind {
		case opUnary:
			if o.call.method == MethodCompact {
				// The replay runs faster than the recording: let every watch deliver what it
				// had delivered by now in the recording before history is compacted under it.
				for k, rec := range recEvents {
					if w := watches[k.stream]; w != nil {
						if rid, ok := w.ids[k.id]; ok {
							if b := lastBelow(rec, o.rev); b > 0 {
								w.eventsUpTo(rid, b, opt.Timeout)
							}
						}
					}
				}
			}
			count(o.call.method).Replayed++
			leases.rewriteRequest(o.req)
			_, resp := newMessage(o.call.method)
			cctx, ccancel := context.WithTimeout(ctx, opt.Timeout)
			err := conn.Invoke(cctx, o.call.method, o.req, resp)
			ccancel()
			if o.rerr != nil && o.rerr.Code == uint32(codes.Canceled) {
				// The recorded client gave up on the call (kube-apiserver cancels a start-up
				// list it no longer needs): what it got was decided by its timing, not by the
				// store, so the call is replayed (a write may have landed) but not compared.
				sum.Skipped[short(o.call.method)+" (cancelled by the recorded client)"]++
				continue
			}
			if err != nil {
				st := status.Convert(err)
				if o.rerr == nil {
					mismatch(o, fmt.Sprintf("replay failed: %s: %s", st.Code(), st.Message()), o.resp, nil)
				} else if uint32(st.Code()) != o.rerr.Code || st.Message() != o.rerr.Message {
					mismatch(o, fmt.Sprintf("different error: recorded code %d %q, replayed %s %q", o.rerr.Code, o.rerr.Message, st.Code(), st.Message()), nil, nil)
				}
				continue
			}
			if o.rerr != nil {
				mismatch(o, fmt.Sprintf("recorded error code %d %q, replay succeeded", o.rerr.Code, o.rerr.Message), nil, resp)
				continue
			}
			if g, ok := resp.(*pb.LeaseGrantResponse); ok {
				leases.add(o.resp.(*pb.LeaseGrantResponse).ID, g.ID)
			}
			normalize(o.resp, leases, false)
			normalize(resp, leases, true)
			if !equal(o.resp, resp) {
				mismatch(o, "different response", o.resp, resp)
			}
		case opWatch:
			w := watches[o.call.id]
			if w == nil {
				w, err = openReplayWatch(ctx, conn)
				if err != nil {
					return sum, err
				}
				watches[o.call.id] = w
			}
			req := o.wreq
			if c := req.GetCancelRequest(); c != nil {
				c.WatchId = w.replayID(c.WatchId)
			}
			if err := w.stream.Send(req); err != nil {
				return sum, fmt.Errorf("watch stream %d: send: %w", o.call.id, err)
			}
			if req.GetCreateRequest() == nil {
				continue
			}
			sum.WatchCreates++
			count(MethodWatch+" create").Replayed++
			var got *pb.WatchResponse
			select {
			case got = <-w.created:
			case <-time.After(opt.Timeout):
			case <-ctx.Done():
				return sum, ctx.Err()
			}
			if got == nil {
				mismatch(&op{call: &call{id: o.call.id, method: MethodWatch + " create"}, rev: o.rev}, "no created response from the replay store", o.wresp, nil)
				continue
			}
			if o.wresp == nil {
				continue // the recording ended before the store answered
			}
			w.mapID(o.wresp.WatchId, got.WatchId)
			rec, rep := cloneWatchResp(o.wresp), cloneWatchResp(got)
			normalize(rec, leases, false)
			normalize(rep, leases, true)
			if !equal(rec, rep) {
				mismatch(&op{call: &call{id: o.call.id, method: MethodWatch + " create"}, rev: o.rev}, "different created response", rec, rep)
			}
		}
	}

	// Compare the events every watch delivered, up to the last event the recording holds.
	keys := make([]recWatchKey, 0, len(recEvents))
	for k := range recEvents {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b recWatchKey) int { return cmp.Or(cmp.Compare(a.stream, b.stream), cmp.Compare(a.id, b.id)) })
	for _, k := range keys {
		rec := recEvents[k]
		bound := modRev(rec[len(rec)-1])
		sum.WatchEvents += len(rec)
		wm := &op{call: &call{id: k.stream, method: MethodWatch + " events"}, rev: bound}
		w := watches[k.stream]
		if w == nil {
			mismatch(wm, fmt.Sprintf("watch %d: no replayed stream", k.id), nil, nil)
			continue
		}
		rid, ok := w.ids[k.id]
		if !ok {
			mismatch(wm, fmt.Sprintf("watch %d: never created in the replay", k.id), nil, nil)
			continue
		}
		got := w.eventsUpTo(rid, bound, opt.Timeout)
		count(MethodWatch + " events").Replayed += len(rec)
		for i := 0; i < max(len(rec), len(got)); i++ {
			var re, ge *mvccpb.Event
			if i < len(rec) {
				re = cloneEvent(rec[i])
			}
			if i < len(got) {
				ge = cloneEvent(got[i])
			}
			a := &pb.WatchResponse{Events: []*mvccpb.Event{re}}
			b := &pb.WatchResponse{Events: []*mvccpb.Event{ge}}
			if re == nil {
				a.Events = nil
			}
			if ge == nil {
				b.Events = nil
			}
			normalize(a, leases, false)
			normalize(b, leases, true)
			if !equal(a, b) {
				count(MethodWatch+" events").Mismatched++
				sum.Mismatches = append(sum.Mismatches, Mismatch{Stream: k.stream, Method: MethodWatch + " events", Revision: bound,
					Reason:   fmt.Sprintf("watch %d: event %d of %d recorded (%d replayed up to revision %d) differs", k.id, i+1, len(rec), len(got), bound),
					Recorded: show(a, 800), Replayed: show(b, 800)})
				break
			}
		}
	}
	for _, w := range watches {
		_ = w.stream.CloseSend()
	}
	sum.Elapsed = time.Since(began)
	return sum, nil
}

func short(method string) string {
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		return method[i+1:]
	}
	return method
}

var unmarshalOpts = protojson.UnmarshalOptions{DiscardUnknown: true}

func unmarshal(b []byte, m protoadapt.MessageV1) error {
	if len(b) == 0 {
		return nil
	}
	return unmarshalOpts.Unmarshal(b, protoadapt.MessageV2Of(m))
}

func cloneWatchResp(r *pb.WatchResponse) *pb.WatchResponse {
	c := &pb.WatchResponse{}
	b, _ := r.Marshal()
	_ = c.Unmarshal(b)
	c.Events = nil // events are compared per watch, not per message
	return c
}

func cloneEvent(e *mvccpb.Event) *mvccpb.Event {
	c := &mvccpb.Event{}
	b, _ := e.Marshal()
	_ = c.Unmarshal(b)
	return c
}

// replayWatch is one watch stream opened on the replay store for one recorded stream.
type replayWatch struct {
	stream  pb.Watch_WatchClient
	created chan *pb.WatchResponse
	ids     map[int64]int64 // recorded watch id → replay watch id
	mu      sync.Mutex
	events  map[int64][]*mvccpb.Event
	ended   map[int64]bool // canceled watches
	done    chan struct{}
	changed chan struct{}
}

func openReplayWatch(ctx context.Context, conn *grpc.ClientConn) (*replayWatch, error) {
	s, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return nil, err
	}
	w := &replayWatch{stream: s, created: make(chan *pb.WatchResponse, 1024), ids: map[int64]int64{},
		events: map[int64][]*mvccpb.Event{}, ended: map[int64]bool{}, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	go func() {
		defer close(w.done)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			if r.Created {
				w.created <- r
			}
			w.mu.Lock()
			if len(r.Events) > 0 {
				w.events[r.WatchId] = append(w.events[r.WatchId], r.Events...)
			}
			if r.Canceled {
				w.ended[r.WatchId] = true
			}
			w.mu.Unlock()
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	}()
	return w, nil
}

func (w *replayWatch) mapID(recorded, replayed int64) { w.ids[recorded] = replayed }

func (w *replayWatch) replayID(recorded int64) int64 {
	if v, ok := w.ids[recorded]; ok {
		return v
	}
	return recorded
}

// eventsUpTo waits until the watch delivered an event at or past bound (or was canceled, or
// timeout passed) and returns its events up to bound.
func (w *replayWatch) eventsUpTo(id, bound int64, timeout time.Duration) []*mvccpb.Event {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		ev := w.events[id]
		reached := w.ended[id] || (len(ev) > 0 && modRev(ev[len(ev)-1]) >= bound)
		var out []*mvccpb.Event
		if reached {
			for _, e := range ev {
				if modRev(e) <= bound {
					out = append(out, e)
				}
			}
		}
		w.mu.Unlock()
		if reached {
			return out
		}
		select {
		case <-w.changed:
		case <-w.done:
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, e := range w.events[id] {
				if modRev(e) <= bound {
					out = append(out, e)
				}
			}
			return out
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, e := range w.events[id] {
				if modRev(e) <= bound {
					out = append(out, e)
				}
			}
			return out
		}
	}
}

// lastBelow is the highest event revision at or below rev.
func lastBelow(ev []*mvccpb.Event, rev int64) int64 {
	var b int64
	for _, e := range ev {
		if r := modRev(e); r <= rev && r > b {
			b = r
		}
	}
	return b
}
