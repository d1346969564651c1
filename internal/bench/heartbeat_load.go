package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// HeartbeatNamespace is where kubelets keep their node Leases.
const HeartbeatNamespace = "kube-node-lease"

// heartbeatLeaseSeconds is the kubelet's default lease duration (renewed every quarter of it).
const heartbeatLeaseSeconds = 40

// kubeletUpdateRetries is the kubelet's lease controller's maxUpdateRetries.
const kubeletUpdateRetries = 5

// HeartbeatLoad renews node Leases through kube-apiserver as kubelets do
// (k8s.io/component-helpers/apimachinery/lease): each lease keeps the object its last Update
// returned, renews by an Update of a copy with renewTime = now, and on a conflict Gets the
// lease and updates that, up to 5 times. Leases are spread over the clients (one HTTP/2
// connection each), and a lease has at most one renewal in flight, as one kubelet does.
type HeartbeatLoad struct {
	leases []*hbLease
	rec    atomic.Pointer[hbRecorder]
}

type hbLease struct {
	client coordclient.LeaseInterface
	name   string
	busy   atomic.Bool
	latest *coordinationv1.Lease // guarded by busy
}

// HeartbeatLeaseName is the name of lease i (a node's name, as the kubelet names its lease).
func HeartbeatLeaseName(i int) string { return fmt.Sprintf("hb-node-%07d", i) }

// NewHeartbeatLoad creates n node Leases (or takes them as they are when they exist), spread
// over clients, concurrency creates at a time.
func NewHeartbeatLoad(ctx context.Context, clients []kubernetes.Interface, n, concurrency int, prog *Progress) (*HeartbeatLoad, error) {
	if len(clients) == 0 || n <= 0 {
		return nil, fmt.Errorf("heartbeat: no clients or no leases")
	}
	l := &HeartbeatLoad{leases: make([]*hbLease, n)}
	for i := range l.leases {
		l.leases[i] = &hbLease{client: clients[i%len(clients)].CoordinationV1().Leases(HeartbeatNamespace), name: HeartbeatLeaseName(i)}
	}
	var next, done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	prog.Start(fmt.Sprintf("creating %d node Leases in %s", n, HeartbeatNamespace), int64(n), 0, done.Load)
	for w := 0; w < max(concurrency, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := l.leases[i].create(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("creating lease %s: %w", l.leases[i].name, err)
					}
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	prog.Done()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return l, nil
}

func (h *hbLease) create(ctx context.Context) error {
	dur := int32(heartbeatLeaseSeconds)
	holder := h.name
	obj := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: h.name, Namespace: HeartbeatNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur,
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	got, err := h.client.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = h.client.Get(ctx, h.name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	h.latest = got
	return nil
}

// Leases is the number of leases renewed.
func (l *HeartbeatLoad) Leases() int { return len(l.leases) }

// hbRecorder collects one step's renewals: those started inside the measured window count
// (their latencies whenever they return); successes are counted by when they return.
type hbRecorder struct {
	from, to time.Time
	mu       sync.Mutex
	puts     *Histogram
	okInWin  int
	started  int
	skipped  int
	errors   int
	conflict int
	gets     int
	errKinds map[string]int
	pending  atomic.Int64 // renewals started in the window and not returned
	done     atomic.Int64 // renewals returned (progress)
}

func newHBRecorder(from, to time.Time) *hbRecorder {
	return &hbRecorder{from: from, to: to, puts: NewHistogram(), errKinds: map[string]int{}}
}

func (r *hbRecorder) inWindow(t time.Time) bool { return !t.Before(r.from) && t.Before(r.to) }

// renew is one kubelet heartbeat: Update of the cached lease with renewTime now; on a
// conflict, Get and Update again (at most kubeletUpdateRetries PUTs).
func (l *HeartbeatLoad) renew(ctx context.Context, h *hbLease, r *hbRecorder, start time.Time) {
	counted := r.inWindow(start)
	var err error
	base := h.latest
	var puts []time.Duration
	conflicts, gets := 0, 0
	for i := 0; i < kubeletUpdateRetries; i++ {
		obj := base.DeepCopy()
		dur := int32(heartbeatLeaseSeconds)
		obj.Spec.LeaseDurationSeconds = &dur
		obj.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		t0 := time.Now()
		var got *coordinationv1.Lease
		got, err = h.client.Update(ctx, obj, metav1.UpdateOptions{})
		puts = append(puts, time.Since(t0))
		if err == nil {
			h.latest = got
			break
		}
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			break
		}
		conflicts++
		gets++
		g, gerr := h.client.Get(ctx, h.name, metav1.GetOptions{})
		if gerr != nil {
			err = gerr
			break
		}
		base = g
	}
	end := time.Now()
	h.busy.Store(false)
	r.done.Add(1)
	if ctx.Err() != nil && err != nil {
		// Stopped by the run, not failed by the server.
		if counted {
			r.pending.Add(-1)
		}
		return
	}
	r.mu.Lock()
	if counted {
		for _, d := range puts {
			r.puts.Record(d)
		}
		r.conflict += conflicts
		r.gets += gets
		if err != nil {
			r.errors++
			r.errKinds[hbErrClass(err)]++
		}
	}
	if err == nil && r.inWindow(end) {
		r.okInWin++
	}
	r.mu.Unlock()
	if counted {
		r.pending.Add(-1)
	}
}

// hbErrClass is an error's reason and code without object names, so equal failures count together.
func hbErrClass(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok {
		st := s.Status()
		return fmt.Sprintf("%d %s", st.Code, st.Reason)
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}

// runStep runs renewals at rate per second for warmup + window: renewal k (from 0) is due at
// k/rate after the start and goes to lease k mod n, so each lease is renewed every n/rate
// seconds. A due renewal whose lease's previous renewal is still in flight is skipped (a
// kubelet's lease controller does not overlap its own). After the window no more are sent and
// the ones started in the window get up to drain to return.
// atFrom and atTo run (each in a goroutine of its own) when the window opens and closes: the
// CPU and metrics readings; runStep returns once both have returned.
func (l *HeartbeatLoad) runStep(ctx context.Context, rate float64, warmup, window, drain time.Duration, prog *Progress, label string, atFrom, atTo func()) *hbRecorder {
	start := time.Now()
	r := newHBRecorder(start.Add(warmup), start.Add(warmup+window))
	var hooks sync.WaitGroup
	hooks.Add(2)
	tFrom := time.AfterFunc(warmup, func() { defer hooks.Done(); atFrom() })
	tTo := time.AfterFunc(warmup+window, func() { defer hooks.Done(); atTo() })
	defer func() {
		// Interrupted before a reading: it will not come.
		if tFrom.Stop() {
			hooks.Done()
		}
		if tTo.Stop() {
			hooks.Done()
		}
		hooks.Wait()
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var sent int64
	n := int64(len(l.leases))
	prog.Start(label, 0, warmup+window, r.done.Load)
	end := start.Add(warmup + window)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			if !now.Before(end) {
				break loop
			}
			due := int64(now.Sub(start).Seconds() * rate)
			for ; sent < due; sent++ {
				h := l.leases[sent%n]
				at := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
				in := r.inWindow(at)
				if !h.busy.CompareAndSwap(false, true) {
					if in {
						r.mu.Lock()
						r.skipped++
						r.mu.Unlock()
					}
					continue
				}
				if in {
					r.mu.Lock()
					r.started++
					r.mu.Unlock()
					r.pending.Add(1)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					l.renew(runCtx, h, r, at)
				}()
			}
		}
	}
	prog.Done()
	// Let the window's renewals return, then stop the rest.
	deadline := time.Now().Add(drain)
	for r.pending.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	return r
}

// fill puts the recorder's figures into s.
func (r *hbRecorder) fill(s *HeartbeatStep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.WindowSeconds = r.to.Sub(r.from).Seconds()
	s.Renewals, s.Dispatched, s.Skipped = r.okInWin, r.started, r.skipped
	s.Errors, s.Conflicts, s.Gets = r.errors, r.conflict, r.gets
	s.Unfinished = int(r.pending.Load())
	if s.WindowSeconds > 0 {
		s.AchievedPerSec = float64(s.Renewals) / s.WindowSeconds
	}
	s.Puts = int(r.puts.Count())
	if s.Puts > 0 {
		s.PutP50Ms = ms(r.puts.Quantile(0.50))
		s.PutP99Ms = ms(r.puts.Quantile(0.99))
		s.PutMaxMs = ms(r.puts.Max())
	}
	for k, v := range r.errKinds {
		s.ErrorKinds = append(s.ErrorKinds, ErrorCount{Error: k, Count: v})
	}
	sort.Slice(s.ErrorKinds, func(i, j int) bool { return s.ErrorKinds[i].Count > s.ErrorKinds[j].Count })
}
