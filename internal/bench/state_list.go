package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/etcdproxy"
)

// StateList is the list phase: what kube-apiserver asks when it starts (every resource
// listed in pages), an unpaginated list of the pods, and RangeStream of them, while a few
// kubelets keep renewing their Leases (point writes, timed against an idle baseline).
type StateList struct {
	Paged   []StateListRun `json:"paged"`
	Unpaged StateListRun   `json:"unpaged_pods"`
	Stream  StateListRun   `json:"range_stream_pods"`
	// Point writes (kube-apiserver's update Txn on Leases) by PointWriters writers.
	PointWriters      int     `json:"point_writers"`
	IdleWrites        int64   `json:"idle_writes"`
	IdleWriteP50Us    float64 `json:"idle_write_p50_us"`
	IdleWriteP99Us    float64 `json:"idle_write_p99_us"`
	ListWrites        int64   `json:"list_writes"`
	ListWriteP50Us    float64 `json:"list_write_p50_us"`
	ListWriteP99Us    float64 `json:"list_write_p99_us"`
	ListWriteMaxUs    float64 `json:"list_write_max_us"`
	WriteErrors       int64   `json:"write_errors"`
	WriteFirstError   string  `json:"write_first_error,omitempty"`
	ListWriteP99Xidle float64 `json:"list_write_p99_x_idle"`
}

// StateListRun is one list: how long, how many keys (and pages or chunks), and the server's
// resident set before it and at its peak during it (sampled from /proc every 10 ms).
type StateListRun struct {
	What        string  `json:"what"`
	Prefix      string  `json:"prefix"`
	Keys        int64   `json:"keys"`
	Want        int64   `json:"want"`
	Pages       int     `json:"pages"` // Range calls, or RangeStream chunks
	Bytes       int64   `json:"bytes"` // values received
	Seconds     float64 `json:"seconds"`
	ServerCPUUs float64 `json:"server_cpu_us"` // the server's CPU time (user + system) during the list
	BaseRSS     uint64  `json:"base_rss_bytes"`
	PeakRSS     uint64  `json:"peak_rss_bytes"`
	Unsupported bool    `json:"unsupported,omitempty"` // the server answered Unimplemented
	NotRun      string  `json:"not_run,omitempty"`     // why the list was not sent
	Error       string  `json:"error,omitempty"`
}

// PeakExtra is the peak resident set above the one before the list.
func (r StateListRun) PeakExtra() int64 {
	if r.PeakRSS == 0 {
		return 0
	}
	return int64(r.PeakRSS) - int64(r.BaseRSS)
}

func (st *stateRun) list(ctx context.Context) (*StateList, error) {
	cfg := st.cfg
	res := &StateList{PointWriters: cfg.PointWriters}
	n := int64(cfg.Nodes)

	idle := st.pointWrites(ctx, func() { time.Sleep(cfg.IdleDuration) })
	res.IdleWrites, res.IdleWriteP50Us, res.IdleWriteP99Us = idle.n, idle.h.P50Us, idle.h.P99Us

	busy := st.pointWrites(ctx, func() {
		for _, kind := range []string{"nodes", "pods", "leases"} {
			r := st.timed("paged", statePrefix(kind), n, func(r *StateListRun) error { return st.pagedList(ctx, st.kc(0), r) })
			res.Paged = append(res.Paged, r)
		}
		if st.podValueBytes > math.MaxInt32 {
			// etcd's client (and kube-apiserver's) refuses a message above 2 GiB before
			// reading it; the servers would build the whole answer and fail to send it.
			res.Unpaged = StateListRun{What: "unpaginated", Prefix: PodPrefix, Want: n, NotRun: fmt.Sprintf(
				"the answer would carry %s of values, above the 2 GiB a gRPC message may hold", FmtBytes(float64(st.podValueBytes)))}
		} else {
			res.Unpaged = st.unpaginated(ctx, n)
		}
		res.Stream = st.timed("range-stream", PodPrefix, n, func(r *StateListRun) error { return rangeStream(ctx, st.conns[0], r) })
		if res.Stream.Unsupported {
			res.Stream.Error = ""
		}
	})
	res.ListWrites, res.ListWriteP50Us, res.ListWriteP99Us, res.ListWriteMaxUs = busy.n, busy.h.P50Us, busy.h.P99Us, busy.h.MaxUs
	return st.finishList(res, idle, busy)
}

// unpaginated is one Range of every pod, as a watch cache's first list without a limit.
func (st *stateRun) unpaginated(ctx context.Context, n int64) StateListRun {
	return st.timed("unpaginated", PodPrefix, n, func(r *StateListRun) error {
		resp, err := st.kc(0).List(ctx, PodPrefix, kubernetes.ListOptions{})
		if err != nil {
			return err
		}
		r.Pages, r.Keys = 1, int64(len(resp.Kvs))
		for _, kv := range resp.Kvs {
			r.Bytes += int64(len(kv.Value))
		}
		if resp.Count != n {
			return fmt.Errorf("count %d, want %d", resp.Count, n)
		}
		return nil
	})
}

func (st *stateRun) finishList(res *StateList, idle, busy writeStats) (*StateList, error) {
	cfg := st.cfg
	var firstErr error
	res.WriteErrors = idle.errs + busy.errs
	res.WriteFirstError = idle.firstErr + busy.firstErr
	if res.IdleWriteP99Us > 0 {
		res.ListWriteP99Xidle = res.ListWriteP99Us / res.IdleWriteP99Us
	}
	for _, r := range append(append([]StateListRun{}, res.Paged...), res.Unpaged, res.Stream) {
		if r.NotRun != "" {
			cfg.logf("%s: %s list of %s not run: %s", st.target.Name, r.What, r.Prefix, r.NotRun)
			continue
		}
		cfg.logf("%s: %s list of %s: %d keys in %.2f s (%d pages), peak RSS +%s%s", st.target.Name, r.What, r.Prefix, r.Keys,
			r.Seconds, r.Pages, FmtBytes(float64(r.PeakExtra())), map[bool]string{true: " (unsupported)", false: ""}[r.Unsupported])
		if r.Error != "" && firstErr == nil {
			firstErr = fmt.Errorf("%s list of %s: %s", r.What, r.Prefix, r.Error)
		}
	}
	cfg.logf("%s: point writes p99 idle %s, during lists %s (%d writes, %d errors)", st.target.Name, FmtUs(res.IdleWriteP99Us),
		FmtUs(res.ListWriteP99Us), res.ListWrites, res.WriteErrors)
	if firstErr == nil && res.WriteErrors > 0 {
		firstErr = fmt.Errorf("%d point writes failed, first: %s", res.WriteErrors, res.WriteFirstError)
	}
	return res, firstErr
}

// timed runs one list with the server's RSS sampled.
func (st *stateRun) timed(what, prefix string, want int64, f func(*StateListRun) error) StateListRun {
	r := StateListRun{What: what, Prefix: prefix, Want: want, BaseRSS: rssBytes(st.target.Pid)}
	r.PeakRSS = r.BaseRSS
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if v := rssBytes(st.target.Pid); v > r.PeakRSS {
					r.PeakRSS = v
				}
			}
		}
	}()
	t0 := time.Now()
	cpu0, cpuErr := ReadProc(st.target.Pid)
	err := f(&r)
	r.Seconds = time.Since(t0).Seconds()
	if cpu1, err1 := ReadProc(st.target.Pid); cpuErr == nil && err1 == nil {
		r.ServerCPUUs = cpu1.CPUMicros() - cpu0.CPUMicros()
	}
	close(stop)
	wg.Wait()
	if err == nil && !r.Unsupported && r.Keys != want {
		err = fmt.Errorf("listed %d keys, want %d", r.Keys, want)
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// pagedList is kube-apiserver's GetList with a limit: pages of PageLimit through the prefix
// (kubernetes.Client.List: Range [continue, prefixEnd) limit L at the revision of the first
// page), the continue key being the last key + "\x00", until a page returns all that is left.
func (st *stateRun) pagedList(ctx context.Context, kc *kubernetes.Client, r *StateListRun) error {
	var rev int64
	cont := ""
	for {
		resp, err := kc.List(ctx, r.Prefix, kubernetes.ListOptions{Revision: rev, Limit: int64(st.cfg.PageLimit), Continue: cont})
		if err != nil {
			return err
		}
		r.Pages++
		r.Keys += int64(len(resp.Kvs))
		for _, kv := range resp.Kvs {
			r.Bytes += int64(len(kv.Value))
		}
		if rev == 0 {
			rev = resp.Revision
		}
		// kube-apiserver: hasMore = len(kvs) < count.
		if int64(len(resp.Kvs)) >= resp.Count || len(resp.Kvs) == 0 {
			return nil
		}
		cont = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// rangeStream reads KV/RangeStream (etcd v3.7) of the prefix chunk by chunk, keeping none.
func rangeStream(ctx context.Context, cli *clientv3.Client, r *StateListRun) error {
	req := &pb.RangeRequest{Key: []byte(r.Prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(r.Prefix))}
	cs, err := cli.ActiveConnection().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/etcdserverpb.KV/RangeStream",
		grpc.ForceCodec(rawStreamCodec{}), grpc.MaxCallRecvMsgSize(256<<20))
	if err == nil {
		err = cs.SendMsg(req)
	}
	if err == nil {
		err = cs.CloseSend()
	}
	for err == nil {
		var f rawStreamFrame
		if err = cs.RecvMsg(&f); err != nil {
			break
		}
		var c *pb.RangeResponse
		if c, err = etcdproxy.RangeStreamChunk(f.b); err != nil {
			break
		}
		r.Pages++
		r.Keys += int64(len(c.Kvs))
		for _, kv := range c.Kvs {
			r.Bytes += int64(len(kv.Value))
		}
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	if status.Code(err) == codes.Unimplemented {
		r.Unsupported = true
	}
	return err
}

// rawStreamCodec sends a RangeRequest and receives frames undecoded: the v3.6 Go API has no
// RangeStreamResponse.
type rawStreamCodec struct{}

func (rawStreamCodec) Name() string { return "proto" }
func (rawStreamCodec) Marshal(v any) ([]byte, error) {
	return v.(interface{ Marshal() ([]byte, error) }).Marshal()
}
func (rawStreamCodec) Unmarshal(data []byte, v any) error {
	return v.(interface{ Unmarshal([]byte) error }).Unmarshal(data)
}

type rawStreamFrame struct{ b []byte }

func (f *rawStreamFrame) Unmarshal(data []byte) error {
	f.b = append(f.b[:0], data...)
	return nil
}

// writeStats are the point writes of one window.
type writeStats struct {
	n, errs  int64
	firstErr string
	h        Latency
}

// pointWrites runs PointWriters lease renewals (the update Txn) for as long as during runs.
func (st *stateRun) pointWrites(ctx context.Context, during func()) writeStats {
	w := st.cfg.PointWriters
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var n, errs atomic.Int64
	var mu sync.Mutex
	var out writeStats
	hist := NewHistogram()
	for g := 0; g < w; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			h := NewHistogram()
			kc := st.kc(g)
			for i := g; ; i += w {
				select {
				case <-stop:
					mu.Lock()
					hist.Merge(h)
					mu.Unlock()
					return
				default:
				}
				if i >= st.cfg.Nodes {
					i = g
				}
				t0 := time.Now()
				err := st.renew(ctx, kc, i, t0)
				h.Record(time.Since(t0))
				n.Add(1)
				if err != nil && errs.Add(1) == 1 {
					mu.Lock()
					out.firstErr = err.Error()
					mu.Unlock()
				}
			}
		}(g)
	}
	during()
	close(stop)
	wg.Wait()
	out.n, out.errs, out.h = n.Load(), errs.Load(), hist.Summary()
	return out
}

// renew is a kubelet's heartbeat through kube-apiserver: the update Txn
// If ModRevision(k) = rev Then Put(k, v) Else Get(k), with the Lease's renewTime set to now.
// A conflict (the Else branch) takes the revision it returns, as GuaranteedUpdate retries.
func (st *stateRun) renew(ctx context.Context, kc *kubernetes.Client, i int, now time.Time) error {
	l := NodeLease(NodeName(i), st.created)
	Renew(l, now)
	val, err := EncodeLease(l)
	if err != nil {
		return err
	}
	key := LeasePrefix + NodeName(i)
	resp, err := kc.OptimisticPut(ctx, key, val, st.leaseRevs[i], kubernetes.PutOptions{GetOnFailure: true})
	if err != nil {
		return err
	}
	if resp.Succeeded {
		st.leaseRevs[i] = resp.Revision
		return nil
	}
	if resp.KV == nil {
		return fmt.Errorf("update of %s: compare failed and the key is gone", key)
	}
	st.leaseRevs[i] = resp.KV.ModRevision
	return errConflict
}

var errConflict = errors.New("update Txn conflict (ModRevision moved)")
