package bench

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The floor: unary RPCs that ask the store for (almost) nothing, on the same
// server, connections and clients as put. Their server CPU per call is what
// the transport (gRPC, HTTP/2, TCP, the runtime) costs; put's minus it is what
// the store's own write path costs.

// GetMissing is a Range of one key that does not exist, linearizable as
// clientv3's Get defaults to (etcd: a ReadIndex, then an index look-up).
type GetMissing struct{ cfg Config }

// NewGetMissing returns the get-missing workload.
func NewGetMissing(cfg Config) *GetMissing {
	cfg.Normalize()
	return &GetMissing{cfg: cfg}
}

func (g *GetMissing) Name() string                                        { return "get-missing" }
func (g *GetMissing) Setup(ctx context.Context, r *Run) error             { return nil }
func (g *GetMissing) Finish(ctx context.Context, r *Run, _ *Result) error { return nil }

func (g *GetMissing) Op(ctx context.Context, w *Worker) error {
	k := w.Rng.Uint64N(uint64(g.cfg.KeySpaceSize))
	_, err := w.Cli.Get(ctx, "/missing/"+FixedKey(k, g.cfg.KeySize))
	return err
}

// StatusCall is the Maintenance Status RPC on the worker's own connection: no
// key at all. (clientv3's Maintenance.Status dials the endpoint anew for every
// call, which measures connection set-up, not the RPC: 86 µs of server CPU per
// call instead of get-missing's 13.)
type StatusCall struct{}

func (StatusCall) Name() string                                        { return "status" }
func (StatusCall) Setup(ctx context.Context, r *Run) error             { return nil }
func (StatusCall) Finish(ctx context.Context, r *Run, _ *Result) error { return nil }

func (StatusCall) Op(ctx context.Context, w *Worker) error {
	_, err := pb.NewMaintenanceClient(w.Cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	return err
}
