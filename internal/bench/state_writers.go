package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
)

// The point writers of the list phase: PointWriters kubelets renewing their Leases with
// kube-apiserver's update Txn, each write's latency counted in the phase it started in
// (idle, then each kind of list). Where they run is StateConfig.PointWritersIn:
//
//   - shared: in the bench's process on the load's connections, writer w on connection w,
//     so writer 0 shares the lister's connection (its small responses queue behind a list's
//     on one HTTP/2 connection) and every writer shares the lister's Go heap (its GC).
//   - conns: in the bench's process, on one connection of their own.
//   - process: in a process of their own (the bench re-executing itself, WritersCmd), on
//     one connection of their own: a kubelet's lease renewal does not come from the
//     process that is listing (the apiserver starting up lists; the Leases are written
//     through the others, or through its own per-resource etcd client after start).
const (
	WritersShared  = "shared"
	WritersConns   = "conns"
	WritersProcess = "process"
)

// pointPhases are the windows point writes are counted in; phase -1 (the writers' first
// 200 ms, connections and goroutines warming) is not counted.
var pointPhases = []string{"idle", "paged", "unpaginated", "stream"}

const (
	phaseIdle = iota
	phasePaged
	phaseUnpaged
	phaseStream
)

// pointResult is what the writers did, per phase; it crosses the process boundary as JSON.
type pointResult struct {
	Hists    []HistogramState `json:"hists"`
	Errs     []int64          `json:"errs"`
	FirstErr string           `json:"first_err,omitempty"`
	Revs     []int64          `json:"revs,omitempty"` // a process's lease revisions at its end
	Err      string           `json:"err,omitempty"`  // the process failed
}

// renewers are w lease writers running in this process.
type renewers struct {
	phase    atomic.Int32
	stopc    chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	hists    []*Histogram
	errs     []int64
	firstErr string
	owned    *clientv3.Client // closed at stop (conns, process)
}

// startRenewers starts w writers; writer g renews leases g, g+w, … with kc(g) and revs
// (writer g alone touches revs[g], revs[g+w], …).
func startRenewers(ctx context.Context, w, nodes int, created time.Time, revs []int64, kc func(g int) *kubernetes.Client) *renewers {
	r := &renewers{stopc: make(chan struct{}), errs: make([]int64, len(pointPhases))}
	r.phase.Store(-1)
	for range pointPhases {
		r.hists = append(r.hists, NewHistogram())
	}
	for g := 0; g < w; g++ {
		r.wg.Add(1)
		go func(g int) {
			defer r.wg.Done()
			hs := make([]*Histogram, len(pointPhases))
			errs := make([]int64, len(pointPhases))
			for i := range hs {
				hs[i] = NewHistogram()
			}
			kc := kc(g)
			first := ""
			for i := g; ; i += w {
				select {
				case <-r.stopc:
					r.mu.Lock()
					for p := range hs {
						r.hists[p].Merge(hs[p])
						r.errs[p] += errs[p]
					}
					if r.firstErr == "" {
						r.firstErr = first
					}
					r.mu.Unlock()
					return
				default:
				}
				if i >= nodes {
					i = g
				}
				p := r.phase.Load()
				t0 := time.Now()
				err := renewLease(ctx, kc, revs, created, i, t0)
				if p < 0 {
					continue
				}
				hs[p].Record(time.Since(t0))
				if err != nil {
					errs[p]++
					if first == "" {
						first = err.Error()
					}
				}
			}
		}(g)
	}
	return r
}

func (r *renewers) setPhase(p int) error {
	r.phase.Store(int32(p))
	return nil
}

func (r *renewers) stop() (pointResult, error) {
	close(r.stopc)
	r.wg.Wait()
	if r.owned != nil {
		r.owned.Close()
	}
	res := pointResult{Errs: r.errs, FirstErr: r.firstErr}
	for _, h := range r.hists {
		res.Hists = append(res.Hists, h.State())
	}
	return res, nil
}

// pointWriterSet is the writers wherever they run.
type pointWriterSet interface {
	setPhase(p int) error
	stop() (pointResult, error)
}

// startPointWriters starts the writers where the config says, in phase -1.
func (st *stateRun) startPointWriters(ctx context.Context) (pointWriterSet, error) {
	cfg := st.cfg
	switch cfg.PointWritersIn {
	case WritersShared:
		return startRenewers(ctx, cfg.PointWriters, cfg.Nodes, st.created, st.leaseRevs, st.kc), nil
	case WritersConns:
		c, err := newClient(st.target.Endpoints)
		if err != nil {
			return nil, err
		}
		kc := &kubernetes.Client{Client: c}
		r := startRenewers(ctx, cfg.PointWriters, cfg.Nodes, st.created, st.leaseRevs, func(int) *kubernetes.Client { return kc })
		r.owned = c
		return r, nil
	case WritersProcess:
		return st.startWriterProc(ctx)
	}
	return nil, fmt.Errorf("point writers in %q: want %s, %s or %s", cfg.PointWritersIn, WritersShared, WritersConns, WritersProcess)
}

// writerProcReq is the first line a writer process reads.
type writerProcReq struct {
	Endpoints []string  `json:"endpoints"`
	Writers   int       `json:"writers"`
	Nodes     int       `json:"nodes"`
	Created   time.Time `json:"created"`
	Revs      []int64   `json:"revs"`
}

// writerProc is the writers in a process of their own: phases and stop are lines on its
// stdin; "ready" and the JSON result are lines on its stdout.
type writerProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	revs []int64 // updated from the result
}

func (st *stateRun) startWriterProc(ctx context.Context) (*writerProc, error) {
	cfg := st.cfg
	if len(cfg.WritersCmd) == 0 {
		return nil, errors.New("point writers in a process: no command to run them (StateConfig.WritersCmd)")
	}
	cmd := exec.CommandContext(ctx, cfg.WritersCmd[0], cfg.WritersCmd[1:]...)
	cmd.Stderr = cfg.Log
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &writerProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), revs: st.leaseRevs}
	req := writerProcReq{Endpoints: st.target.Endpoints, Writers: cfg.PointWriters, Nodes: cfg.Nodes, Created: st.created, Revs: st.leaseRevs}
	if err := json.NewEncoder(in).Encode(req); err != nil {
		p.kill()
		return nil, err
	}
	line, err := p.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		p.kill()
		return nil, fmt.Errorf("point writer process: %q %v", line, err)
	}
	return p, nil
}

func (p *writerProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func (p *writerProc) setPhase(ph int) error {
	_, err := fmt.Fprintf(p.in, "phase %d\n", ph)
	return err
}

func (p *writerProc) stop() (pointResult, error) {
	var res pointResult
	if _, err := io.WriteString(p.in, "stop\n"); err != nil {
		p.kill()
		return res, err
	}
	line, err := p.out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &res)
	}
	werr := p.cmd.Wait()
	if err == nil && res.Err != "" {
		err = errors.New(res.Err)
	}
	if err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return res, fmt.Errorf("point writer process: %w", err)
	}
	if len(res.Revs) == len(p.revs) {
		copy(p.revs, res.Revs)
	}
	return res, nil
}

// RunStateWriters is the writer process (`meganode bench state-writers`, hidden): a
// writerProcReq line on in, "ready" on out once connected, then "phase N" lines until
// "stop", answered by the pointResult as one JSON line.
func RunStateWriters(ctx context.Context, in io.Reader, out io.Writer) error {
	rd := bufio.NewReaderSize(in, 1<<20)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return err
	}
	var req writerProcReq
	if err := json.Unmarshal(line, &req); err != nil {
		return err
	}
	if req.Writers <= 0 || req.Nodes <= 0 || len(req.Revs) != req.Nodes {
		return fmt.Errorf("state-writers: %d writers, %d nodes, %d revisions", req.Writers, req.Nodes, len(req.Revs))
	}
	c, err := newClient(req.Endpoints)
	if err != nil {
		return err
	}
	kc := &kubernetes.Client{Client: c}
	r := startRenewers(ctx, req.Writers, req.Nodes, req.Created, req.Revs, func(int) *kubernetes.Client { return kc })
	r.owned = c
	if _, err := io.WriteString(out, "ready\n"); err != nil {
		return err
	}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			_, _ = r.stop()
			return fmt.Errorf("state-writers: stdin: %w", err)
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "phase":
			p, err := strconv.Atoi(f[1])
			if err != nil || p < -1 || p >= len(pointPhases) {
				return fmt.Errorf("state-writers: bad phase %q", line)
			}
			_ = r.setPhase(p)
		case len(f) == 1 && f[0] == "stop":
			res, _ := r.stop()
			res.Revs = req.Revs
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			_, err = out.Write(append(b, '\n'))
			return err
		default:
			return fmt.Errorf("state-writers: unknown command %q", line)
		}
	}
}
