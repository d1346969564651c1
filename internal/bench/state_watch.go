package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StateWatch is the watch phase: Watchers streams on each kind's prefix (five apiservers'
// watch caches, each on its own connection, from the current revision with prevKV and
// progress notifications, as kube-apiserver watches) while Clients kubelets renew the
// Leases with the update Txn as fast as they can for the duration.
type StateWatch struct {
	Watchers            int     `json:"watchers"` // in all
	Seconds             float64 `json:"seconds"`
	Writes              int64   `json:"writes"` // successful renewals
	WritesPerSec        float64 `json:"writes_per_sec"`
	Conflicts           int64   `json:"conflicts"`
	WriteErrors         int64   `json:"write_errors"`
	FirstError          string  `json:"first_error,omitempty"`
	Events              int64   `json:"events"` // delivered, summed over every watcher
	EventsPerSec        float64 `json:"events_per_sec"`
	Missing             int64   `json:"events_missing"`    // lease watchers × writes − lease events, after a drain
	Unexpected          int64   `json:"events_unexpected"` // events on the node and pod prefixes (nothing wrote there)
	DelayP50Us          float64 `json:"delay_p50_us"`      // write sent → event received (renewTime in the event's value)
	DelayP99Us          float64 `json:"delay_p99_us"`
	DelayMaxUs          float64 `json:"delay_max_us"`
	ServerCPUPerEventUs float64 `json:"server_cpu_per_event_us"`
	DrainSeconds        float64 `json:"drain_seconds"`
}

// delaySample: every watcher decodes one event in delaySample to read its renewTime (decoding
// all would make the client, on the same cores, the bottleneck).
const delaySample = 4

func (st *stateRun) watch(ctx context.Context) (*StateWatch, error) {
	cfg := st.cfg
	res := &StateWatch{}
	g, err := st.conns[0].Get(ctx, "health")
	if err != nil {
		return nil, err
	}
	fromRev := g.Header.Revision + 1
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watchConns []*clientv3.Client
	defer func() { CloseAll(watchConns) }()
	var leaseEvents, otherEvents atomic.Int64
	var werrMu sync.Mutex
	var werr error
	hists := []*Histogram{}
	var wg sync.WaitGroup
	created := make(chan error, 3*cfg.Watchers)
	for _, kind := range StateKinds {
		for k := 0; k < cfg.Watchers; k++ {
			c, err := newClient(st.target.Endpoints)
			if err != nil {
				return nil, err
			}
			watchConns = append(watchConns, c)
			h := NewHistogram()
			hists = append(hists, h)
			prefix := statePrefix(kind)
			wch := c.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithRev(fromRev), clientv3.WithPrevKV(),
				clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
			counter := &otherEvents
			if kind == "leases" {
				counter = &leaseEvents
			}
			wg.Add(1)
			go func(kind string, wch clientv3.WatchChan, h *Histogram, counter *atomic.Int64) {
				defer wg.Done()
				first, seen := true, 0
				for resp := range wch {
					if first {
						first = false
						created <- resp.Err()
						if resp.Created {
							continue
						}
					}
					if err := resp.Err(); err != nil {
						if wctx.Err() == nil {
							werrMu.Lock()
							werr = fmt.Errorf("watcher on %s: %v", kind, err)
							werrMu.Unlock()
						}
						return
					}
					now := time.Now()
					for _, ev := range resp.Events {
						seen++
						if kind == "leases" && seen%delaySample == 0 {
							if l, err := DecodeLease(ev.Kv.Value); err == nil && l.Spec.RenewTime != nil {
								h.Record(now.Sub(l.Spec.RenewTime.Time))
							}
						}
					}
					counter.Add(int64(len(resp.Events)))
				}
				if first {
					created <- fmt.Errorf("watch on %s closed before it was created", kind)
				}
			}(kind, wch, h, counter)
		}
	}
	res.Watchers = len(watchConns)
	for range watchConns {
		select {
		case err := <-created:
			if err != nil {
				return nil, err
			}
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("watches not created after 30 s")
		}
	}
	cfg.logf("%s: %d watchers; renewing leases with %d clients for %s", st.target.Name, res.Watchers, cfg.Clients, cfg.WatchDuration)

	// Writers: client c renews leases c, c+Clients, … round-robin until the deadline.
	var writes, conflicts, errs atomic.Int64
	var firstErr atomic.Value
	pw := StartProcWatch(st.target.Pid)
	start := time.Now()
	deadline := start.Add(cfg.WatchDuration)
	var ww sync.WaitGroup
	for c := 0; c < cfg.Clients && c < cfg.Nodes; c++ {
		ww.Add(1)
		go func(c int) {
			defer ww.Done()
			kc := st.kc(c)
			for i := c; time.Now().Before(deadline) && ctx.Err() == nil; i += cfg.Clients {
				if i >= cfg.Nodes {
					i = c
				}
				switch err := st.renew(ctx, kc, i, time.Now()); err {
				case nil:
					writes.Add(1)
				case errConflict:
					conflicts.Add(1)
				default:
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					return
				}
			}
		}(c)
	}
	ww.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.Writes, res.Conflicts, res.WriteErrors = writes.Load(), conflicts.Load(), errs.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstError = v
	}
	// Drain: every lease watcher should see every successful write.
	want := res.Writes * int64(cfg.Watchers)
	t0 := time.Now()
	for leaseEvents.Load() < want && time.Since(t0) < 60*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	res.DrainSeconds = time.Since(t0).Seconds()
	use := pw.Stop()
	time.Sleep(200 * time.Millisecond) // anything extra would show up now
	cancel()
	CloseAll(watchConns)
	watchConns = nil
	wg.Wait()

	res.Events = leaseEvents.Load() + otherEvents.Load()
	res.Missing = want - leaseEvents.Load()
	res.Unexpected = otherEvents.Load()
	if res.Seconds > 0 {
		res.WritesPerSec = float64(res.Writes) / res.Seconds
		res.EventsPerSec = float64(res.Events) / res.Seconds
	}
	if res.Events > 0 {
		res.ServerCPUPerEventUs = use.CPUMicros / float64(res.Events)
	}
	all := NewHistogram()
	for _, h := range hists {
		all.Merge(h)
	}
	s := all.Summary()
	res.DelayP50Us, res.DelayP99Us, res.DelayMaxUs = s.P50Us, s.P99Us, s.MaxUs
	cfg.logf("%s: %d renewals (%.0f/s, %d conflicts, %d errors); %d events delivered (%.0f/s), delay p50 %s p99 %s, %d missing, %d unexpected",
		st.target.Name, res.Writes, res.WritesPerSec, res.Conflicts, res.WriteErrors, res.Events, res.EventsPerSec,
		FmtUs(res.DelayP50Us), FmtUs(res.DelayP99Us), res.Missing, res.Unexpected)
	switch {
	case werr != nil:
		return res, werr
	case res.WriteErrors > 0:
		return res, fmt.Errorf("%d renewals failed, first: %s", res.WriteErrors, res.FirstError)
	case res.Missing != 0 || res.Unexpected != 0:
		return res, fmt.Errorf("watchers got %d events fewer than written and %d where nothing was written", res.Missing, res.Unexpected)
	}
	return res, nil
}
