// Package bench is meganode's load generator: workloads shaped like etcd's own
// benchmark and like kube-apiserver's traffic, run with the official Go client
// against meganode-store and real etcd, with server CPU and memory read from /proc.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Config of one run. Zero values get defaults in Normalize.
type Config struct {
	Clients        int           // concurrent workers (etcd benchmark's --clients)
	Conns          int           // gRPC connections shared by the workers (--conns)
	Total          int64         // operations to run; 0 = run for Duration
	Duration       time.Duration // used when Total is 0
	Rate           float64       // total operations per second; 0 = as fast as possible
	KeySize        int
	ValSize        int
	KeySpaceSize   int
	SequentialKeys bool

	Leases    int // lease-flood: Lease objects in all (split over the clients)
	Watchers  int // watch: watch streams on the prefix, each on its own connection
	Keys      int // range: keys under the listed prefix
	PageLimit int // range: limit per page

	Label string // free text that names a variant, e.g. "fsync"

	// Progress, if set, is told about each phase and can read the op counter.
	Progress *Progress
}

// Normalize fills defaults and bounds.
func (c *Config) Normalize() {
	if c.Clients <= 0 {
		c.Clients = 1
	}
	if c.Conns <= 0 {
		c.Conns = 1
	}
	if c.Conns > c.Clients {
		c.Conns = c.Clients
	}
	if c.Total <= 0 && c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.KeySize <= 0 {
		c.KeySize = 8
	}
	if c.ValSize < 0 {
		c.ValSize = 0
	}
	if c.KeySpaceSize <= 0 {
		c.KeySpaceSize = 1
	}
	if c.Leases <= 0 {
		c.Leases = 10 * c.Clients
	}
	if c.Leases < c.Clients {
		c.Leases = c.Clients
	}
	if c.Watchers <= 0 {
		c.Watchers = 1
	}
	if c.Keys <= 0 {
		c.Keys = 10000
	}
	if c.PageLimit <= 0 {
		c.PageLimit = 500
	}
}

// Workload is one kind of load. Setup runs before the clock starts, Op is one
// measured operation, Drain (optional, still inside the CPU window) waits for the
// server to finish work the ops started, Finish adds workload figures.
type Workload interface {
	Name() string
	Setup(ctx context.Context, r *Run) error
	Op(ctx context.Context, w *Worker) error
	Finish(ctx context.Context, r *Run, res *Result) error
}

// Drainer is implemented by workloads whose server work outlives the ops (watch).
type Drainer interface {
	Drain(ctx context.Context, r *Run) error
}

// Worker is one concurrent client loop.
type Worker struct {
	ID    int
	Cli   *clientv3.Client
	Rng   *rand.Rand
	Seq   uint64 // global sequence number of the current op
	Hist  *Histogram
	State any // the workload's per-worker state
}

// Run is the shared state of a run, visible to the workload.
type Run struct {
	Cfg     Config
	Target  *Target
	Conns   []*clientv3.Client
	Workers []*Worker
	ops     atomic.Int64
}

// Result of one run against one target. Target is TargetName ("meganode", "etcd (3
// members)"); for a group, Members is its size and Server the sum over its members.
type Result struct {
	Workload         string             `json:"workload"`
	Label            string             `json:"label,omitempty"`
	Target           string             `json:"target"`
	Members          int                `json:"members,omitempty"`
	Round            int                `json:"round"`
	Clients          int                `json:"clients"`
	Conns            int                `json:"conns"`
	Params           map[string]any     `json:"params"`
	Started          time.Time          `json:"started"`
	DurationS        float64            `json:"duration_s"`
	Ops              int64              `json:"ops"`
	Errors           int64              `json:"errors"`
	FirstError       string             `json:"first_error,omitempty"`
	OpsPerSec        float64            `json:"ops_per_sec"`
	Latency          Latency            `json:"latency"`
	Server           ProcUsage          `json:"server"`
	ServerCPUPerOpUs float64            `json:"server_cpu_per_op_us"`
	Client           ProcUsage          `json:"client"`
	ClientCPUPerOpUs float64            `json:"client_cpu_per_op_us"`
	Extra            map[string]float64 `json:"extra,omitempty"`
	// Machine-wide busy cores during the run, and the part of it that was
	// neither the server nor this client (other work on a shared machine).
	HostBusyCores float64 `json:"host_busy_cores"`
	OtherCores    float64 `json:"other_cores"`
}

// Name of the workload with its label, e.g. "put (fsync)".
func (r *Result) Name() string { return displayName(r.Workload, r.Label) }

func displayName(w, label string) string {
	if label == "" {
		return w
	}
	return w + " (" + label + ")"
}

// Connect opens n client connections to the endpoints and checks each answers.
func Connect(ctx context.Context, endpoints []string, n int) ([]*clientv3.Client, error) {
	return ConnectTLS(ctx, endpoints, n, nil)
}

// ConnectTLS is Connect over TLS with tlsCfg (nil: plaintext).
func ConnectTLS(ctx context.Context, endpoints []string, n int, tlsCfg *tls.Config) ([]*clientv3.Client, error) {
	var out []*clientv3.Client
	for i := 0; i < n; i++ {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:          endpoints,
			DialTimeout:        5 * time.Second,
			Logger:             zap.NewNop(),
			MaxCallSendMsgSize: 8 << 20,
			TLS:                tlsCfg,
		})
		if err != nil {
			CloseAll(out)
			return nil, err
		}
		out = append(out, c)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Get(cctx, "health")
		cancel()
		if err != nil {
			CloseAll(out)
			return nil, fmt.Errorf("connection %d to %v: %w", i, endpoints, err)
		}
	}
	return out, nil
}

// CloseAll closes clients.
func CloseAll(cs []*clientv3.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// Execute runs workload wl against target t with cfg, as round `round`.
func Execute(ctx context.Context, wl Workload, t *Target, cfg Config, round int) (*Result, error) {
	cfg.Normalize()
	conns, err := ConnectTLS(ctx, t.Endpoints, cfg.Conns, t.TLS)
	if err != nil {
		return nil, err
	}
	defer CloseAll(conns)
	r := &Run{Cfg: cfg, Target: t, Conns: conns}
	seed := uint64(time.Now().UnixNano())
	for i := 0; i < cfg.Clients; i++ {
		r.Workers = append(r.Workers, &Worker{
			ID:   i,
			Cli:  conns[i%len(conns)],
			Rng:  rand.New(rand.NewPCG(seed, uint64(i))),
			Hist: NewHistogram(),
		})
	}
	label := fmt.Sprintf("%s %s c=%d", displayName(wl.Name(), cfg.Label), t.Name, cfg.Clients)
	if round > 0 {
		label += fmt.Sprintf(" r%d", round)
	}
	cfg.Progress.Phase(label + ": setup")
	if err := wl.Setup(ctx, r); err != nil {
		return nil, fmt.Errorf("%s setup: %w", wl.Name(), err)
	}

	var limiter *rate.Limiter
	if cfg.Rate > 0 {
		burst := int(cfg.Rate / 100)
		if burst < 1 {
			burst = 1
		}
		limiter = rate.NewLimiter(rate.Limit(cfg.Rate), burst)
	}

	var (
		issued   atomic.Uint64
		stop     atomic.Bool
		errCount atomic.Int64
		firstErr atomic.Value
	)
	srv := StartServerWatch(t.ServerPids())
	self := StartProcWatch(os.Getpid())
	host0, _ := ReadHostCPU()
	window := time.Now()
	stopPoll := make(chan struct{})
	go func() {
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopPoll:
				return
			case <-tk.C:
				srv.Poll()
			}
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	if cfg.Total <= 0 {
		timer := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
		defer timer.Stop()
	}
	cfg.Progress.Start(label, cfg.Total, cfg.Duration, r.ops.Load)
	var wg sync.WaitGroup
	for _, w := range r.Workers {
		wg.Add(1)
		go func(w *Worker) {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				seq := issued.Add(1)
				if cfg.Total > 0 && seq > uint64(cfg.Total) {
					return
				}
				if limiter != nil && limiter.Wait(ctx) != nil {
					return
				}
				w.Seq = seq - 1
				t0 := time.Now()
				err := wl.Op(ctx, w)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if errCount.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					// A dead server makes every op fail at once: give up rather than spin.
					if errCount.Load() > 10000 && r.ops.Load() == 0 {
						stop.Store(true)
					}
					continue
				}
				w.Hist.Record(time.Since(t0))
				r.ops.Add(1)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(started)
	cfg.Progress.Done()
	if d, ok := wl.(Drainer); ok {
		cfg.Progress.Phase(label + ": draining")
		if err := d.Drain(ctx, r); err != nil {
			return nil, fmt.Errorf("%s drain: %w", wl.Name(), err)
		}
	}
	close(stopPoll)
	su := srv.Stop()
	cu := self.Stop()
	host1, _ := ReadHostCPU()
	windowS := time.Since(window).Seconds()

	h := NewHistogram()
	for _, w := range r.Workers {
		h.Merge(w.Hist)
	}
	res := &Result{
		Workload: wl.Name(), Label: cfg.Label, Target: t.Name, Members: t.Members, Round: round,
		Clients: cfg.Clients, Conns: cfg.Conns, Started: started,
		Params: map[string]any{
			"key_size": cfg.KeySize, "val_size": cfg.ValSize, "key_space_size": cfg.KeySpaceSize,
			"sequential_keys": cfg.SequentialKeys, "total": cfg.Total, "duration_s": cfg.Duration.Seconds(),
			"rate": cfg.Rate,
		},
		DurationS:  elapsed.Seconds(),
		Ops:        r.ops.Load(),
		Errors:     errCount.Load(),
		Latency:    h.Summary(),
		Server:     su,
		Client:     cu,
		Extra:      map[string]float64{},
		OtherCores: OtherCores(host0, host1, su, cu, windowS),
	}
	if windowS > 0 && host1.Busy >= host0.Busy {
		res.HostBusyCores = float64(host1.Busy-host0.Busy) / clockTicks / windowS
	}
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	}
	if res.Ops > 0 {
		if su.Measured {
			res.ServerCPUPerOpUs = su.CPUMicros / float64(res.Ops)
		}
		if cu.Measured {
			res.ClientCPUPerOpUs = cu.CPUMicros / float64(res.Ops)
		}
	}
	if err := wl.Finish(ctx, r, res); err != nil {
		return res, fmt.Errorf("%s: %w", wl.Name(), err)
	}
	if res.Ops == 0 {
		return res, errors.New("no operation succeeded: " + res.FirstError)
	}
	return res, nil
}

// forEachWorker runs f for every worker concurrently and returns the first error.
func forEachWorker(r *Run, f func(w *Worker) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, w := range r.Workers {
		wg.Add(1)
		go func(w *Worker) {
			defer wg.Done()
			if err := f(w); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return first
}

// New returns the workload called name.
func New(name string, cfg Config) (Workload, error) {
	switch name {
	case "put":
		return NewPut(cfg), nil
	case "lease-flood":
		return NewLeaseFlood(cfg)
	case "watch":
		return NewWatch(cfg), nil
	case "range":
		return NewRange(cfg), nil
	case "get-missing":
		return NewGetMissing(cfg), nil
	case "status":
		return StatusCall{}, nil
	}
	return nil, fmt.Errorf("unknown workload %q (want put, lease-flood, watch, range, get-missing or status)", name)
}

// Workloads lists the workload names.
var Workloads = []string{"put", "get-missing", "status", "lease-flood", "watch", "range"}
