package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RangePrefix is the prefix the range workload fills and lists.
const RangePrefix = "/registry/pods/bench-range/"

// Range is kube-apiserver's paginated LIST straight from the store: pages of
// `limit` keys over [prefix, prefixEnd) with count, the continue key being the
// last key + "\x00", every page after the first pinned to the revision the first
// one returned. Workers alternate a list at the latest revision with a list at an
// old revision (taken after the prefix was filled, before 10 % of its keys were
// rewritten). One op = one page; whole lists are timed separately.
type Range struct {
	cfg    Config
	oldRev int64
	keys   atomic.Int64
	lists  [2]atomic.Int64
	bad    atomic.Int64
	mu     sync.Mutex
	hists  [2]*Histogram
}

type listState struct {
	mode    int // 0 = latest, 1 = old revision
	next    string
	rev     int64
	seen    int
	started time.Time
	hists   [2]*Histogram
}

// NewRange returns the range workload.
func NewRange(cfg Config) *Range {
	cfg.Normalize()
	return &Range{cfg: cfg, hists: [2]*Histogram{NewHistogram(), NewHistogram()}}
}

func (rg *Range) Name() string { return "range" }

// fill writes keys [from, to) with a pool of writers over the run's connections.
func (rg *Range) fill(ctx context.Context, r *Run, keys []int, val string) (int64, error) {
	const writers = 64
	var next atomic.Int64
	var rev atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(cli *clientv3.Client) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(keys)) {
					return
				}
				resp, err := cli.Put(ctx, RangePrefix+FixedKey(uint64(keys[i]), rg.cfg.KeySize), val)
				if err != nil {
					errs <- err
					return
				}
				for {
					cur := rev.Load()
					if resp.Header.Revision <= cur || rev.CompareAndSwap(cur, resp.Header.Revision) {
						break
					}
				}
			}
		}(r.Conns[g%len(r.Conns)])
	}
	wg.Wait()
	close(errs)
	return rev.Load(), <-errs
}

func (rg *Range) Setup(ctx context.Context, r *Run) error {
	n := r.Cfg.Keys
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	r.Cfg.Progress.Phase(fmt.Sprintf("range: writing %d keys of %d B under %s", n, r.Cfg.ValSize, RangePrefix))
	oldRev, err := rg.fill(ctx, r, all, randomValue(r.Cfg.ValSize))
	if err != nil {
		return err
	}
	rg.oldRev = oldRev
	var some []int
	for i := 0; i < n; i += 10 {
		some = append(some, i)
	}
	if _, err := rg.fill(ctx, r, some, randomValue(r.Cfg.ValSize)); err != nil {
		return err
	}
	for _, w := range r.Workers {
		w.State = &listState{mode: w.ID % 2, hists: [2]*Histogram{NewHistogram(), NewHistogram()}}
	}
	return nil
}

func (rg *Range) Op(ctx context.Context, w *Worker) error {
	st := w.State.(*listState)
	end := clientv3.GetPrefixRangeEnd(RangePrefix)
	if st.next == "" {
		st.next = RangePrefix
		st.seen = 0
		st.started = time.Now()
		st.rev = 0
		if st.mode == 1 {
			st.rev = rg.oldRev
		}
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(rg.cfg.PageLimit))}
	if st.rev != 0 {
		opts = append(opts, clientv3.WithRev(st.rev))
	}
	resp, err := w.Cli.Get(ctx, st.next, opts...)
	if err != nil {
		st.next = "" // start the list again
		return err
	}
	if st.rev == 0 {
		st.rev = resp.Header.Revision
	}
	st.seen += len(resp.Kvs)
	rg.keys.Add(int64(len(resp.Kvs)))
	if resp.More && len(resp.Kvs) > 0 {
		st.next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		return nil
	}
	// The list is complete.
	st.hists[st.mode].Record(time.Since(st.started))
	rg.lists[st.mode].Add(1)
	wrong := st.seen != rg.cfg.Keys
	st.next = ""
	st.mode ^= 1
	if wrong {
		rg.bad.Add(1)
		return fmt.Errorf("a list returned %d keys, want %d", st.seen, rg.cfg.Keys)
	}
	return nil
}

func (rg *Range) Finish(ctx context.Context, r *Run, res *Result) error {
	for _, w := range r.Workers {
		if st, ok := w.State.(*listState); ok {
			rg.hists[0].Merge(st.hists[0])
			rg.hists[1].Merge(st.hists[1])
		}
	}
	res.Params["keys"] = r.Cfg.Keys
	res.Params["page_limit"] = r.Cfg.PageLimit
	res.Extra["old_revision"] = float64(rg.oldRev)
	if res.DurationS > 0 {
		res.Extra["keys_per_sec"] = float64(rg.keys.Load()) / res.DurationS
	}
	for i, name := range []string{"latest", "old"} {
		s := rg.hists[i].Summary()
		res.Extra["lists_"+name] = float64(rg.lists[i].Load())
		res.Extra["list_"+name+"_p50_us"] = s.P50Us
		res.Extra["list_"+name+"_p99_us"] = s.P99Us
		res.Extra["list_"+name+"_max_us"] = s.MaxUs
	}
	res.Extra["wrong_lists"] = float64(rg.bad.Load())
	return nil
}
