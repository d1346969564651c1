package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WatchPrefix is the prefix the watch workload writes under and watches.
const WatchPrefix = "/registry/pods/bench-watch/"

// Watch is N kube-apiserver watch caches on one resource prefix while writers
// write to it: every watcher, on its own connection, watches the prefix from
// "now" with prevKV and progress notifications (as the apiserver does). An op is
// one write; each value starts with its write time, so every delivered event
// gives the delay from the write to its delivery.
type Watch struct {
	cfg Config

	watchConns []*clientv3.Client
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	hists      []*Histogram
	events     atomic.Int64
	lastEvent  atomic.Int64 // unix ns of the latest event received
	start      time.Time
	drainTook  time.Duration
	watchErr   atomic.Value
}

// NewWatch returns the watch workload.
func NewWatch(cfg Config) *Watch {
	cfg.Normalize()
	return &Watch{cfg: cfg}
}

func (wt *Watch) Name() string { return "watch" }

func (wt *Watch) Setup(ctx context.Context, r *Run) error {
	conns, err := ConnectTLS(ctx, r.Target.Endpoints, r.Cfg.Watchers, r.Target.TLS)
	if err != nil {
		return err
	}
	wt.watchConns = conns
	wctx, cancel := context.WithCancel(context.Background())
	wt.cancel = cancel
	created := make(chan error, len(conns))
	for i, c := range conns {
		h := NewHistogram()
		wt.hists = append(wt.hists, h)
		wch := c.Watch(clientv3.WithRequireLeader(wctx), WatchPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(),
			clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		wt.wg.Add(1)
		go func(i int, wch clientv3.WatchChan, h *Histogram) {
			defer wt.wg.Done()
			first := true
			for resp := range wch {
				if first {
					first = false
					if resp.Err() != nil {
						created <- resp.Err()
						return
					}
					created <- nil
					if resp.Created {
						continue
					}
				}
				if err := resp.Err(); err != nil {
					if wctx.Err() == nil {
						wt.watchErr.Store(fmt.Sprintf("watcher %d: %v", i, err))
					}
					return
				}
				now := time.Now()
				for _, ev := range resp.Events {
					if v := ev.Kv.Value; len(v) >= 8 {
						h.Record(now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))))
					}
				}
				if n := len(resp.Events); n > 0 {
					wt.events.Add(int64(n))
					wt.lastEvent.Store(now.UnixNano())
				}
			}
			if first {
				created <- fmt.Errorf("watch %d closed before it was created", i)
			}
		}(i, wch, h)
	}
	for range conns {
		select {
		case err := <-created:
			if err != nil {
				wt.stop()
				return err
			}
		case <-time.After(30 * time.Second):
			wt.stop()
			return fmt.Errorf("watches not created after 30s")
		case <-ctx.Done():
			wt.stop()
			return ctx.Err()
		}
	}
	wt.start = time.Now()
	return nil
}

func (wt *Watch) stop() {
	if wt.cancel != nil {
		wt.cancel()
	}
	CloseAll(wt.watchConns)
	wt.wg.Wait()
	wt.watchConns = nil
}

func (wt *Watch) Op(ctx context.Context, w *Worker) error {
	size := wt.cfg.ValSize
	if size < 8 {
		size = 8
	}
	buf, _ := w.State.([]byte)
	if buf == nil {
		buf = make([]byte, size)
		copy(buf[8:], randomValue(size-8))
		w.State = buf
	}
	k := w.Rng.Uint64N(uint64(wt.cfg.KeySpaceSize))
	binary.BigEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
	_, err := w.Cli.Put(ctx, WatchPrefix+FixedKey(k, wt.cfg.KeySize), string(buf))
	return err
}

// Drain waits (up to 10 s) until every watcher has seen every acknowledged write.
func (wt *Watch) Drain(ctx context.Context, r *Run) error {
	want := r.ops.Load() * int64(len(wt.hists))
	t0 := time.Now()
	for wt.events.Load() < want && time.Since(t0) < 10*time.Second && ctx.Err() == nil {
		if wt.watchErr.Load() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wt.drainTook = time.Since(t0)
	wt.stop()
	return nil
}

func (wt *Watch) Finish(ctx context.Context, r *Run, res *Result) error {
	if wt.watchConns != nil {
		wt.stop()
	}
	h := NewHistogram()
	for _, x := range wt.hists {
		h.Merge(x)
	}
	ev := wt.events.Load()
	want := res.Ops * int64(len(wt.hists))
	res.Params["watchers"] = len(wt.hists)
	res.Extra["events"] = float64(ev)
	res.Extra["events_missing"] = float64(max(0, want-ev))
	res.Extra["drain_s"] = wt.drainTook.Seconds()
	if last := wt.lastEvent.Load(); last > 0 {
		if span := time.Unix(0, last).Sub(wt.start).Seconds(); span > 0 {
			res.Extra["events_per_sec"] = float64(ev) / span
		}
	}
	if ev > 0 && res.Server.Measured {
		res.Extra["server_cpu_per_event_us"] = res.Server.CPUMicros / float64(ev)
	}
	d := h.Summary()
	res.Extra["delay_p50_us"] = d.P50Us
	res.Extra["delay_p90_us"] = d.P90Us
	res.Extra["delay_p99_us"] = d.P99Us
	res.Extra["delay_p999_us"] = d.P999Us
	res.Extra["delay_max_us"] = d.MaxUs
	if s, ok := wt.watchErr.Load().(string); ok {
		return fmt.Errorf("%s", s)
	}
	return nil
}
