package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/meganode/meganode/internal/scheduler/metrics"
)

// The wire: gRPC without protoc. A codec passes []byte frames through untouched (relays never
// decode a pod) and encodes the small control messages as JSON. Frames travel on a
// client-streaming RPC so HTTP/2 flow control plus the receivers' bounded queues push back
// on senders.

const serviceName = "meganode.scheduler.v1.Scheduler"

type rawCodec struct{}

func (rawCodec) Name() string { return "meganode-raw" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	var b []byte
	switch m := v.(type) {
	case *[]byte:
		b = *m
	case []byte:
		b = m
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b := data.Materialize()
	if m, ok := v.(*[]byte); ok {
		*m = b
		return nil
	}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

type empty struct{}

// Node is what one process serves: any of a frame sink (relay/shard), a proposal sink
// (collector) and a decision sink (shard).
type Node struct {
	Frames    FrameSink
	Proposals ProposalSink
	Decisions DecisionSink
}

type grpcServer struct{ n Node }

// receive hands every message of a client stream to handle until the client closes it (then
// answers with an empty message) or handle fails.
func receive(stream grpc.ServerStream, handle func(ctx context.Context, b []byte) error) error {
	ctx := stream.Context()
	for {
		var b []byte
		if err := stream.RecvMsg(&b); err != nil {
			if err == io.EOF {
				return stream.SendMsg(&empty{})
			}
			return err
		}
		if err := handle(ctx, b); err != nil {
			return err
		}
	}
}

func (s *grpcServer) scatter(stream grpc.ServerStream) error {
	return receive(stream, func(ctx context.Context, b []byte) error {
		if s.n.Frames == nil {
			return fmt.Errorf("this process takes no frames")
		}
		return s.n.Frames.Send(ctx, b)
	})
}

// control is one message on the Control stream: exactly one of the fields is set.
type control struct {
	P *Proposal     `json:"p,omitempty"`
	D *Decision     `json:"d,omitempty"`
	R *CommitResult `json:"r,omitempty"`
}

func (s *grpcServer) control(stream grpc.ServerStream) error {
	return receive(stream, func(ctx context.Context, b []byte) error {
		var m control
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		var err error
		switch {
		case m.P != nil && s.n.Proposals != nil:
			err = s.n.Proposals.Propose(ctx, *m.P)
		case m.R != nil && s.n.Proposals != nil:
			err = s.n.Proposals.Result(ctx, *m.R)
		case m.D != nil && s.n.Decisions != nil:
			err = s.n.Decisions.Decide(ctx, *m.D)
		default:
			metrics.For("wire").Add("misrouted_control", 1)
		}
		if err != nil { // a sink's refusal is counted, not fatal to the stream
			metrics.For("wire").Add("control_errors", 1)
		}
		return nil
	})
}

func unary[T any](call func(context.Context, T) error) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var m T
		if err := dec(&m); err != nil {
			return nil, err
		}
		return &empty{}, call(ctx, m)
	}
}

func (s *grpcServer) desc() *grpc.ServiceDesc {
	missing := func(what string) error { return fmt.Errorf("this process is no %s", what) }
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Propose", Handler: unary(func(ctx context.Context, p Proposal) error {
				if s.n.Proposals == nil {
					return missing("collector")
				}
				return s.n.Proposals.Propose(ctx, p)
			})},
			{MethodName: "Result", Handler: unary(func(ctx context.Context, r CommitResult) error {
				if s.n.Proposals == nil {
					return missing("collector")
				}
				return s.n.Proposals.Result(ctx, r)
			})},
			{MethodName: "Decide", Handler: unary(func(ctx context.Context, d Decision) error {
				if s.n.Decisions == nil {
					return missing("shard")
				}
				return s.n.Decisions.Decide(ctx, d)
			})},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Scatter", ClientStreams: true, Handler: func(_ any, stream grpc.ServerStream) error { return s.scatter(stream) }},
			{StreamName: "Control", ClientStreams: true, Handler: func(_ any, stream grpc.ServerStream) error { return s.control(stream) }},
		},
	}
}

// Serve serves n on lis until ctx ends.
func Serve(ctx context.Context, lis net.Listener, n Node) error {
	gs := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxRecvMsgSize(64<<20))
	s := &grpcServer{n: n}
	gs.RegisterService(s.desc(), s)
	go func() { <-ctx.Done(); gs.Stop() }()
	err := gs.Serve(lis)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Client talks to one remote Node. It implements FrameSink, ProposalSink and DecisionSink.
type Client struct {
	addr string
	cc   *grpc.ClientConn
	out  chan []byte // frames
	ctl  chan []byte // control messages (JSON)
}

// Dial connects to addr (127.0.0.1:port). Frames go through one long-lived stream fed by a
// bounded queue of queueLen frames.
func Dial(ctx context.Context, addr string, queueLen int) (*Client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, cc: cc, out: make(chan []byte, max(queueLen, 1)), ctl: make(chan []byte, 4096)}
	go c.pump(ctx, "Scatter", c.out)
	go c.pump(ctx, "Control", c.ctl)
	return c, nil
}

// pump keeps one client stream open and feeds it from q, reconnecting after errors.
func (c *Client) pump(ctx context.Context, method string, q chan []byte) {
	for ctx.Err() == nil {
		stream, err := c.cc.NewStream(ctx, &grpc.StreamDesc{StreamName: method, ClientStreams: true}, "/"+serviceName+"/"+method)
		if err == nil {
			for {
				var b []byte
				select {
				case <-ctx.Done():
					_ = stream.CloseSend()
					return
				case b = <-q:
				}
				if err = stream.SendMsg(&b); err != nil {
					// The frame is lost with the stream; the collector's deadline covers it
					// (an unanswered attempt is requeued, never dropped).
					break
				}
			}
		}
		metrics.For("wire").Add("stream_errors", 1)
		select {
		case <-ctx.Done():
			return
		case <-sleepCh(200):
		}
	}
}

// Send queues a frame; it blocks while the queue is full.
func (c *Client) Send(ctx context.Context, frame []byte) error {
	select {
	case c.out <- frame:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) call(ctx context.Context, method string, m any) error {
	return c.cc.Invoke(ctx, "/"+serviceName+"/"+method, m, &empty{})
}

// Control messages go on a stream, not as unary calls (one unary round trip costs ~100× a
// streamed message: see `scheduler simulate`). They are fire-and-forget: a message lost with a
// broken stream is covered by the collector's deadlines (unanswered → decided without it or
// requeued; unreported bind → commit timeout → requeued; a bound pod is never bound twice
// because its next attempt finds it gone from the intake or the Binding is refused).
func (c *Client) enqueue(ctx context.Context, m control) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	select {
	case c.ctl <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Propose sends a proposal to a collector.
func (c *Client) Propose(ctx context.Context, p Proposal) error {
	return c.enqueue(ctx, control{P: &p})
}

// Result sends a commit result to a collector.
func (c *Client) Result(ctx context.Context, r CommitResult) error {
	return c.enqueue(ctx, control{R: &r})
}

// Decide sends a decision to a shard.
func (c *Client) Decide(ctx context.Context, d Decision) error { return c.enqueue(ctx, control{D: &d}) }

// ProposeSync is the unary form of Propose (kept for measurements and debugging).
func (c *Client) ProposeSync(ctx context.Context, p Proposal) error {
	return c.call(ctx, "Propose", &p)
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

func sleepCh(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }
