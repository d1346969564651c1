// Package relay is the scatter tree: relays of fanout F forward each frame to every child as
// opaque bytes, with one bounded queue per child so a slow shard pushes back instead of growing
// memory. It needs only the wire (frames go in and out as wire.FrameSink); the pods that must
// reach every shard go through it, sampled ones go to their shards directly.
package relay

import (
	"context"
	"fmt"

	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Relay forwards every frame it receives to each of its children, as opaque bytes. Each child
// has its own bounded queue; Send blocks while any child's queue is full, so a slow shard
// slows the tree down instead of growing memory without bound (back-pressure).
type Relay struct {
	name   string
	queues []chan []byte
	m      *metrics.Counters
}

// New starts a relay over children with queueLen frames of buffer per child.
func New(ctx context.Context, name string, children []wire.FrameSink, queueLen int) *Relay {
	r := &Relay{name: name, m: metrics.For("relay/" + name)}
	for _, c := range children {
		q := make(chan []byte, max(queueLen, 1))
		r.queues = append(r.queues, q)
		go func(c wire.FrameSink) {
			for {
				select {
				case <-ctx.Done():
					return
				case f := <-q:
					if err := c.Send(ctx, f); err != nil && ctx.Err() == nil {
						r.m.Add("send_errors", 1)
					}
				}
			}
		}(c)
	}
	return r
}

// Send implements FrameSink.
func (r *Relay) Send(ctx context.Context, frame []byte) error {
	r.m.Add("frames", 1)
	for _, q := range r.queues {
		select {
		case q <- frame:
		default:
			r.m.Add("blocked", 1) // back-pressure: wait for the slow child
			select {
			case q <- frame:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// BuildTree puts relays of at most fanout children over leaves until one root remains, and
// returns the root and the number of relays. With len(leaves) ≤ fanout the root is one relay.
func BuildTree(ctx context.Context, leaves []wire.FrameSink, fanout, queueLen int) (wire.FrameSink, int) {
	if fanout < 2 {
		fanout = 2
	}
	level, relays, depth := leaves, 0, 0
	for {
		var next []wire.FrameSink
		for i := 0; i < len(level); i += fanout {
			next = append(next, New(ctx, fmt.Sprintf("d%d-%d", depth, i/fanout), level[i:min(i+fanout, len(level))], queueLen))
			relays++
		}
		depth++
		if len(next) == 1 {
			return next[0], relays
		}
		level = next
	}
}

// TreeShape returns relays and depth of the tree BuildTree makes for leaves shards.
func TreeShape(leaves, fanout int) (relays, depth int) {
	if fanout < 2 {
		fanout = 2
	}
	for n := leaves; ; {
		n = (n + fanout - 1) / fanout
		relays += n
		depth++
		if n <= 1 {
			return relays, depth
		}
	}
}
