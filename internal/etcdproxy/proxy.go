// Package etcdproxy is a transparent gRPC proxy for the etcd v3 API (KV, Watch, Lease,
// Maintenance, Cluster, and any other method as raw bytes, e.g. KV/RangeStream) that records
// every request and response as JSON lines, and a replayer that sends a recording to a fresh
// store and compares the responses. Put between kube-apiserver and its store, it turns real
// apiserver traffic into a regression test for the store.
package etcdproxy

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec used for typed messages
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/protoadapt"
)

// Full method names.
const (
	MethodRange       = "/etcdserverpb.KV/Range"
	MethodPut         = "/etcdserverpb.KV/Put"
	MethodDeleteRange = "/etcdserverpb.KV/DeleteRange"
	MethodTxn         = "/etcdserverpb.KV/Txn"
	MethodCompact     = "/etcdserverpb.KV/Compact"
	MethodRangeStream = "/etcdserverpb.KV/RangeStream"

	MethodWatch = "/etcdserverpb.Watch/Watch"

	MethodLeaseGrant      = "/etcdserverpb.Lease/LeaseGrant"
	MethodLeaseRevoke     = "/etcdserverpb.Lease/LeaseRevoke"
	MethodLeaseKeepAlive  = "/etcdserverpb.Lease/LeaseKeepAlive"
	MethodLeaseTimeToLive = "/etcdserverpb.Lease/LeaseTimeToLive"
	MethodLeaseLeases     = "/etcdserverpb.Lease/LeaseLeases"

	MethodAlarm      = "/etcdserverpb.Maintenance/Alarm"
	MethodStatus     = "/etcdserverpb.Maintenance/Status"
	MethodDefragment = "/etcdserverpb.Maintenance/Defragment"
	MethodHash       = "/etcdserverpb.Maintenance/Hash"
	MethodHashKV     = "/etcdserverpb.Maintenance/HashKV"
	MethodSnapshot   = "/etcdserverpb.Maintenance/Snapshot"
	MethodMoveLeader = "/etcdserverpb.Maintenance/MoveLeader"
	MethodDowngrade  = "/etcdserverpb.Maintenance/Downgrade"

	MethodMemberAdd     = "/etcdserverpb.Cluster/MemberAdd"
	MethodMemberRemove  = "/etcdserverpb.Cluster/MemberRemove"
	MethodMemberUpdate  = "/etcdserverpb.Cluster/MemberUpdate"
	MethodMemberList    = "/etcdserverpb.Cluster/MemberList"
	MethodMemberPromote = "/etcdserverpb.Cluster/MemberPromote"
)

// Proxy forwards the etcd v3 gRPC API to one upstream store.
type Proxy struct {
	conn    *grpc.ClientConn
	kv      pb.KVClient
	watch   pb.WatchClient
	lease   pb.LeaseClient
	maint   pb.MaintenanceClient
	cluster pb.ClusterClient
	rec     *Recorder
	ids     atomic.Uint64
	active  atomic.Int64
}

// New connects to target (host:port or http://host:port; plaintext) and records into rec
// (nil: forward only). The connection is made lazily, so the store may start later.
func New(target string, rec *Recorder) (*Proxy, error) {
	target = strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	conn, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}),
			grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	if err != nil {
		return nil, err
	}
	return &Proxy{conn: conn, kv: pb.NewKVClient(conn), watch: pb.NewWatchClient(conn), lease: pb.NewLeaseClient(conn),
		maint: pb.NewMaintenanceClient(conn), cluster: pb.NewClusterClient(conn), rec: rec}, nil
}

// Close closes the upstream connection (not the recorder).
func (p *Proxy) Close() error { return p.conn.Close() }

// Active is the number of calls and streams in flight.
func (p *Proxy) Active() int64 { return p.active.Load() }

// NewServer returns a gRPC server serving the proxy: the five etcd services with their Go
// types, and every other method (KV/RangeStream, Auth, …) forwarded as bytes.
func (p *Proxy) NewServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{}),
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.UnknownServiceHandler(p.forwardRaw),
		grpc.WaitForHandlers(true),
	}, opts...)
	s := grpc.NewServer(opts...)
	pb.RegisterKVServer(s, kvServer{p})
	pb.RegisterWatchServer(s, watchServer{p})
	pb.RegisterLeaseServer(s, leaseServer{p})
	pb.RegisterMaintenanceServer(s, maintServer{p})
	pb.RegisterClusterServer(s, clusterServer{p})
	return s
}

// Serve serves the proxy on l until ctx ends, then stops the server (ending every stream) and
// returns once every handler has returned.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	s := p.NewServer()
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case <-ctx.Done():
		s.Stop()
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

// outgoing carries the client's metadata (e.g. etcd's hasleader) to the upstream call.
func outgoing(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	out := metadata.MD{}
	for k, v := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
			continue
		}
		switch k {
		case "content-type", "user-agent", "te", "authority":
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// unary forwards one call, recording request and response.
func unary[Req, Resp protoadapt.MessageV1](p *Proxy, ctx context.Context, method string, req Req,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	p.active.Add(1)
	defer p.active.Add(-1)
	id := p.ids.Add(1)
	p.rec.Log(id, DirReq, method, req, nil)
	var hdr, trl metadata.MD
	resp, err := call(outgoing(ctx), req, grpc.Header(&hdr), grpc.Trailer(&trl))
	if len(hdr) > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if len(trl) > 0 {
		_ = grpc.SetTrailer(ctx, trl)
	}
	if err != nil {
		p.rec.Log(id, DirResp, method, nil, err)
		return resp, err
	}
	p.rec.Log(id, DirResp, method, resp, nil)
	return resp, nil
}

type serverSide[Req, Resp any] interface {
	Send(Resp) error
	Recv() (Req, error)
	grpc.ServerStream
}

type clientSide[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
	grpc.ClientStream
}

// bidi forwards a bidirectional stream: client→store on a goroutine, store→client on the
// handler's goroutine. The upstream stream lives in a context derived from the client's, so a
// client that goes away cancels it; the handler returns when the upstream side ends (its status
// is passed on), and returning ends the client's stream.
func bidi[Req, Resp any](p *Proxy, method string, down serverSide[Req, Resp],
	open func(context.Context, ...grpc.CallOption) (clientSide[Req, Resp], error)) error {
	p.active.Add(1)
	defer p.active.Add(-1)
	id := p.ids.Add(1)
	ctx, cancel := context.WithCancel(outgoing(down.Context()))
	defer cancel()
	up, err := open(ctx)
	if err != nil {
		p.rec.Log(id, DirEnd, method, nil, err)
		return err
	}
	go func() {
		for {
			m, err := down.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					p.rec.Log(id, DirHalfClose, method, nil, nil)
					_ = up.CloseSend()
				} else {
					cancel()
				}
				return
			}
			p.rec.Log(id, DirReq, method, m, nil)
			if err := up.Send(m); err != nil {
				return // the upstream stream ended; its Recv reports why
			}
		}
	}()
	return pipeDown(p, id, method, ctx, down, up)
}

// pipeDown sends what the store sends until it ends the stream.
func pipeDown[Resp any](p *Proxy, id uint64, method string, ctx context.Context, down interface {
	Send(Resp) error
	grpc.ServerStream
}, up interface {
	Recv() (Resp, error)
	grpc.ClientStream
}) error {
	first := true
	for {
		m, err := up.Recv()
		if err != nil {
			if t := up.Trailer(); len(t) > 0 {
				down.SetTrailer(t)
			}
			if errors.Is(err, io.EOF) {
				p.rec.Log(id, DirEnd, method, nil, nil)
				return nil
			}
			p.rec.Log(id, DirEnd, method, nil, err)
			return err
		}
		if first {
			first = false
			if h, err := up.Header(); err == nil && len(h) > 0 {
				_ = down.SetHeader(h)
			}
		}
		p.rec.Log(id, DirResp, method, m, nil)
		if err := down.Send(m); err != nil {
			p.rec.Log(id, DirEnd, method, nil, err)
			return err
		}
	}
}

// serverStreaming forwards one request and the stream of responses (Snapshot).
func serverStreaming[Req, Resp any](p *Proxy, method string, req Req, down interface {
	Send(Resp) error
	grpc.ServerStream
}, open func(context.Context, Req, ...grpc.CallOption) (interface {
	Recv() (Resp, error)
	grpc.ClientStream
}, error)) error {
	p.active.Add(1)
	defer p.active.Add(-1)
	id := p.ids.Add(1)
	ctx, cancel := context.WithCancel(outgoing(down.Context()))
	defer cancel()
	p.rec.Log(id, DirReq, method, req, nil)
	up, err := open(ctx, req)
	if err != nil {
		p.rec.Log(id, DirEnd, method, nil, err)
		return err
	}
	return pipeDown(p, id, method, ctx, down, up)
}

// ---- raw forwarding for methods outside the v3.6 Go API ----

// frame is a message forwarded as its bytes.
type frame struct{ b []byte }

// codec passes frames through untouched and everything else to the standard proto codec. It is
// named "proto" so the content type on the wire stays application/grpc+proto.
type codec struct{}

var protoCodec = encoding.GetCodecV2("proto")

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return protoCodec.Marshal(v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		f.b = data.Materialize()
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

type rawServer struct{ grpc.ServerStream }

func (s rawServer) Send(f *frame) error { return s.SendMsg(f) }
func (s rawServer) Recv() (*frame, error) {
	f := &frame{}
	return f, s.RecvMsg(f)
}

type rawClient struct{ grpc.ClientStream }

func (c rawClient) Send(f *frame) error { return c.SendMsg(f) }
func (c rawClient) Recv() (*frame, error) {
	f := &frame{}
	return f, c.RecvMsg(f)
}

// forwardRaw forwards any method the typed services do not know, as a bidirectional stream of
// byte frames (a unary call is a stream of one message each way on the wire).
func (p *Proxy) forwardRaw(_ any, down grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(down)
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	return bidi[*frame, *frame](p, method, rawServer{down}, func(ctx context.Context, _ ...grpc.CallOption) (clientSide[*frame, *frame], error) {
		cs, err := p.conn.NewStream(ctx, desc, method)
		if err != nil {
			return nil, err
		}
		return rawClient{cs}, nil
	})
}

// ---- the typed services ----

type kvServer struct{ p *Proxy }

func (s kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return unary(s.p, ctx, MethodRange, r, s.p.kv.Range)
}
func (s kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return unary(s.p, ctx, MethodPut, r, s.p.kv.Put)
}
func (s kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return unary(s.p, ctx, MethodDeleteRange, r, s.p.kv.DeleteRange)
}
func (s kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	return unary(s.p, ctx, MethodTxn, r, s.p.kv.Txn)
}
func (s kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return unary(s.p, ctx, MethodCompact, r, s.p.kv.Compact)
}

type watchServer struct{ p *Proxy }

func (s watchServer) Watch(down pb.Watch_WatchServer) error {
	return bidi[*pb.WatchRequest, *pb.WatchResponse](s.p, MethodWatch, down,
		func(ctx context.Context, o ...grpc.CallOption) (clientSide[*pb.WatchRequest, *pb.WatchResponse], error) {
			return s.p.watch.Watch(ctx, o...)
		})
}

type leaseServer struct{ p *Proxy }

func (s leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return unary(s.p, ctx, MethodLeaseGrant, r, s.p.lease.LeaseGrant)
}
func (s leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return unary(s.p, ctx, MethodLeaseRevoke, r, s.p.lease.LeaseRevoke)
}
func (s leaseServer) LeaseKeepAlive(down pb.Lease_LeaseKeepAliveServer) error {
	return bidi[*pb.LeaseKeepAliveRequest, *pb.LeaseKeepAliveResponse](s.p, MethodLeaseKeepAlive, down,
		func(ctx context.Context, o ...grpc.CallOption) (clientSide[*pb.LeaseKeepAliveRequest, *pb.LeaseKeepAliveResponse], error) {
			return s.p.lease.LeaseKeepAlive(ctx, o...)
		})
}
func (s leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return unary(s.p, ctx, MethodLeaseTimeToLive, r, s.p.lease.LeaseTimeToLive)
}
func (s leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return unary(s.p, ctx, MethodLeaseLeases, r, s.p.lease.LeaseLeases)
}

type maintServer struct{ p *Proxy }

func (s maintServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return unary(s.p, ctx, MethodAlarm, r, s.p.maint.Alarm)
}
func (s maintServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	return unary(s.p, ctx, MethodStatus, r, s.p.maint.Status)
}
func (s maintServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return unary(s.p, ctx, MethodDefragment, r, s.p.maint.Defragment)
}
func (s maintServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	return unary(s.p, ctx, MethodHash, r, s.p.maint.Hash)
}
func (s maintServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return unary(s.p, ctx, MethodHashKV, r, s.p.maint.HashKV)
}
func (s maintServer) Snapshot(r *pb.SnapshotRequest, down pb.Maintenance_SnapshotServer) error {
	return serverStreaming[*pb.SnapshotRequest, *pb.SnapshotResponse](s.p, MethodSnapshot, r, down,
		func(ctx context.Context, r *pb.SnapshotRequest, o ...grpc.CallOption) (interface {
			Recv() (*pb.SnapshotResponse, error)
			grpc.ClientStream
		}, error) {
			return s.p.maint.Snapshot(ctx, r, o...)
		})
}
func (s maintServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return unary(s.p, ctx, MethodMoveLeader, r, s.p.maint.MoveLeader)
}
func (s maintServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return unary(s.p, ctx, MethodDowngrade, r, s.p.maint.Downgrade)
}

type clusterServer struct{ p *Proxy }

func (s clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return unary(s.p, ctx, MethodMemberAdd, r, s.p.cluster.MemberAdd)
}
func (s clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return unary(s.p, ctx, MethodMemberRemove, r, s.p.cluster.MemberRemove)
}
func (s clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return unary(s.p, ctx, MethodMemberUpdate, r, s.p.cluster.MemberUpdate)
}
func (s clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return unary(s.p, ctx, MethodMemberList, r, s.p.cluster.MemberList)
}
func (s clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return unary(s.p, ctx, MethodMemberPromote, r, s.p.cluster.MemberPromote)
}
