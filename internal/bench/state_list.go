package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
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
	// Where the writers ran (state_writers.go: shared, conns, process) and their figures per
	// phase: idle, then during the paged lists, the unpaginated Range, the RangeStream.
	PointWritersIn string            `json:"point_writers_in"`
	WritePhases    []StatePointPhase `json:"write_phases"`
}

// StatePointPhase is the point writes that started in one phase.
type StatePointPhase struct {
	Phase    string  `json:"phase"`
	Writes   int64   `json:"writes"`
	Errors   int64   `json:"errors"`
	P50Us    float64 `json:"p50_us"`
	P99Us    float64 `json:"p99_us"`
	MaxUs    float64 `json:"max_us"`
	P99Xidle float64 `json:"p99_x_idle"`
}

// phaseCell is the p99 during each kind of list, and against idle.
func (l *StateList) phaseCell() string {
	var p99s, xs []string
	for _, ph := range l.WritePhases {
		if ph.Phase == "idle" {
			continue
		}
		if ph.Writes < 100 { // a phase too short to have a p99 (etcd's Unimplemented RangeStream)
			p99s, xs = append(p99s, fmt.Sprintf("- (%d writes)", ph.Writes)), append(xs, "-")
			continue
		}
		p99s = append(p99s, FmtUs(ph.P99Us))
		xs = append(xs, fmt.Sprintf("%.2f×", ph.P99Xidle))
	}
	return strings.Join(p99s, " / ") + " (" + strings.Join(xs, " / ") + ")"
}

// setPointWrites fills the point-write figures from the writers' per-phase histograms:
// idle is phase 0, "during the lists" all the others merged.
func (l *StateList) setPointWrites(pr pointResult) {
	busy := NewHistogram()
	var idleP99 float64
	for p, name := range pointPhases {
		h := NewHistogram()
		if p < len(pr.Hists) {
			h = HistogramFromState(pr.Hists[p])
		}
		var errs int64
		if p < len(pr.Errs) {
			errs = pr.Errs[p]
		}
		s := h.Summary()
		ph := StatePointPhase{Phase: name, Writes: int64(s.Count), Errors: errs, P50Us: s.P50Us, P99Us: s.P99Us, MaxUs: s.MaxUs}
		if p == phaseIdle {
			idleP99 = s.P99Us
			l.IdleWrites, l.IdleWriteP50Us, l.IdleWriteP99Us = ph.Writes, s.P50Us, s.P99Us
		} else {
			busy.Merge(h)
		}
		if idleP99 > 0 {
			ph.P99Xidle = s.P99Us / idleP99
		}
		l.WriteErrors += errs
		l.WritePhases = append(l.WritePhases, ph)
	}
	b := busy.Summary()
	l.ListWrites, l.ListWriteP50Us, l.ListWriteP99Us, l.ListWriteMaxUs = int64(b.Count), b.P50Us, b.P99Us, b.MaxUs
	l.WriteFirstError = pr.FirstErr
	if l.IdleWriteP99Us > 0 {
		l.ListWriteP99Xidle = l.ListWriteP99Us / l.IdleWriteP99Us
	}
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
	res := &StateList{PointWriters: cfg.PointWriters, PointWritersIn: cfg.PointWritersIn}
	n := int64(cfg.Nodes)

	pw, err := st.startPointWriters(ctx)
	if err != nil {
		return res, fmt.Errorf("point writers: %w", err)
	}
	// A phase switch that fails (the writer process gone) fails the phase: its writes would be
	// counted in the wrong window.
	var phaseErr error
	phase := func(p int) {
		if err := pw.setPhase(p); err != nil && phaseErr == nil {
			phaseErr = err
		}
	}
	time.Sleep(200 * time.Millisecond) // phase -1: warming, not counted
	phase(phaseIdle)
	time.Sleep(cfg.IdleDuration)
	phase(phasePaged)
	for _, kind := range []string{"nodes", "pods", "leases"} {
		r := st.timed("paged", statePrefix(kind), n, func(r *StateListRun) error { return st.pagedList(ctx, st.kc(0), r) })
		res.Paged = append(res.Paged, r)
	}
	phase(phaseUnpaged)
	if st.podValueBytes > math.MaxInt32 {
		// etcd's client (and kube-apiserver's) refuses a message above 2 GiB before
		// reading it; the servers would build the whole answer and fail to send it.
		res.Unpaged = StateListRun{What: "unpaginated", Prefix: PodPrefix, Want: n, NotRun: fmt.Sprintf(
			"the answer would carry %s of values, above the 2 GiB a gRPC message may hold", FmtBytes(float64(st.podValueBytes)))}
	} else {
		res.Unpaged = st.unpaginated(ctx, n)
	}
	phase(phaseStream)
	res.Stream = st.timed("range-stream", PodPrefix, n, func(r *StateListRun) error { return rangeStream(ctx, st.conns[0], r) })
	if res.Stream.Unsupported {
		res.Stream.Error = ""
	}
	pr, err := pw.stop()
	if err == nil {
		err = phaseErr
	}
	if err != nil {
		return res, fmt.Errorf("point writers: %w", err)
	}
	res.setPointWrites(pr)
	var firstErr error
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
	cfg.logf("%s: point writes (%s) p99 idle %s, during lists %s (%d writes, %d errors); %s", st.target.Name, res.PointWritersIn,
		FmtUs(res.IdleWriteP99Us), FmtUs(res.ListWriteP99Us), res.ListWrites, res.WriteErrors, res.phaseCell())
	if firstErr == nil && res.WriteErrors > 0 {
		firstErr = fmt.Errorf("%d point writes failed, first: %s", res.WriteErrors, res.WriteFirstError)
	}
	return res, firstErr
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

// renew is a kubelet's heartbeat through kube-apiserver: the update Txn
// If ModRevision(k) = rev Then Put(k, v) Else Get(k), with the Lease's renewTime set to now.
// A conflict (the Else branch) takes the revision it returns, as GuaranteedUpdate retries.
func (st *stateRun) renew(ctx context.Context, kc *kubernetes.Client, i int, now time.Time) error {
	return renewLease(ctx, kc, st.leaseRevs, st.created, i, now)
}

// renewLease renews lease i (created at created) with the revision revs[i], updating it.
func renewLease(ctx context.Context, kc *kubernetes.Client, revs []int64, created time.Time, i int, now time.Time) error {
	l := NodeLease(NodeName(i), created)
	Renew(l, now)
	val, err := EncodeLease(l)
	if err != nil {
		return err
	}
	key := LeasePrefix + NodeName(i)
	resp, err := kc.OptimisticPut(ctx, key, val, revs[i], kubernetes.PutOptions{GetOnFailure: true})
	if err != nil {
		return err
	}
	if resp.Succeeded {
		revs[i] = resp.Revision
		return nil
	}
	if resp.KV == nil {
		return fmt.Errorf("update of %s: compare failed and the key is gone", key)
	}
	revs[i] = resp.KV.ModRevision
	return errConflict
}

var errConflict = errors.New("update Txn conflict (ModRevision moved)")
