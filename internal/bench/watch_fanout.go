package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/storeproc"
)

// `bench watch-fanout` (issue 36's fan-out target): W watchers on the pods prefix — as W
// kube-apiservers' watch caches would be — under a steady write load through the leader,
// all on the leader or spread over the three members; the leader's CPU per committed write
// compared. Per-process CPU: this machine's 2 cores run the load, the watchers and all three
// members, so throughput cannot show what separate hosts would.

// Placements of the watchers.
const (
	FanoutLeader = "leader"
	FanoutSpread = "spread"
	// FanoutAlone is the leader's share of FanoutSpread (every third watcher) with none on
	// the followers: the leader's cost when the followers' watchers are served on hosts of
	// their own. On this machine the followers' fan-out in FanoutSpread runs on the same two
	// cores as the leader, and the leader's own CPU per write grows with that contention.
	FanoutAlone = "leader-share-alone"
)

// FanoutPlacements in the order of a round; RunFanout rotates it every round.
var FanoutPlacements = []string{FanoutLeader, FanoutSpread, FanoutAlone}

// FanoutSpec says how many watchers, how fast and how long.
type FanoutSpec struct {
	Watchers int
	Rate     int // puts per second
	Duration time.Duration
	Rounds   int
	ValSize  int
	Log      io.Writer
	StoreLog io.Writer
}

// FanoutRun is one placement on one fresh group.
type FanoutRun struct {
	Placement string `json:"placement"`
	Round     int    `json:"round"`
	Watchers  int    `json:"watchers"`
	// Watchers per member, in member order (the leader's first).
	PerMember []int   `json:"watchers_per_member"`
	Writes    int64   `json:"writes"`
	Seconds   float64 `json:"seconds"`
	// CPU (user+system) over the write window, per committed write.
	LeaderCPUPerWriteUs    float64   `json:"leader_cpu_us_per_write"`
	FollowersCPUPerWriteUs []float64 `json:"followers_cpu_us_per_write"`
	// Events every watcher got, and whether each got every write once, in revision order.
	EventsPerWatcher []int64 `json:"-"`
	MinEvents        int64   `json:"min_events_per_watcher"`
	Violations       int     `json:"watchers_missing_reordered_or_duplicated"`
	FirstViolation   string  `json:"first_violation,omitempty"`
}

func (s FanoutSpec) logf(format string, a ...any) { logLine(s.Log, format, a...) }

// RunFanout runs both placements each round, their order swapped every other round.
func RunFanout(ctx context.Context, s FanoutSpec, onRun func(*FanoutRun)) ([]*FanoutRun, error) {
	var runs []*FanoutRun
	for r := 0; r < s.Rounds; r++ {
		n := len(FanoutPlacements)
		for i := range FanoutPlacements {
			p := FanoutPlacements[(i+r)%n]
			run, err := fanoutOnce(ctx, s, p, r+1)
			if err != nil {
				return runs, fmt.Errorf("%s, round %d: %w", p, r+1, err)
			}
			runs = append(runs, run)
			if onRun != nil {
				onRun(run)
			}
		}
	}
	return runs, nil
}

// fanWatcher is one watch stream's account of what it got.
type fanWatcher struct {
	events  atomic.Int64
	lastRev int64
	bad     string
}

func fanoutOnce(ctx context.Context, s FanoutSpec, placement string, round int) (*FanoutRun, error) {
	g, leader, err := startGroupWithLeader(ctx, s.StoreLog)
	if err != nil {
		return nil, err
	}
	defer g.Stop()
	members := []*storeproc.Proc{leader}
	for _, m := range g.Members {
		if m != leader {
			members = append(members, m)
		}
	}
	res := &FanoutRun{Placement: placement, Round: round, PerMember: make([]int, 3)}
	const prefix = "/registry/pods/"
	// Start after the first write's revision: the group's own entries (none are keys) leave it at 1.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var watchers []*fanWatcher
	var clients []*clientv3.Client
	defer func() { CloseAll(clients) }()
	var started sync.WaitGroup
	var wg sync.WaitGroup
	for i := 0; i < s.Watchers; i++ {
		at := 0
		switch placement {
		case FanoutSpread:
			at = i % 3
		case FanoutAlone:
			if i%3 != 0 {
				continue
			}
		}
		m := members[at]
		res.PerMember[at]++
		// One connection per watcher, as each kube-apiserver has its own.
		c, err := newClient([]string{m.Endpoint})
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
		w := &fanWatcher{}
		watchers = append(watchers, w)
		started.Add(1)
		wg.Add(1)
		go func(c *clientv3.Client, w *fanWatcher) {
			defer wg.Done()
			wch := c.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			first := true
			for resp := range wch {
				if first {
					started.Done()
					first = false
				}
				if err := resp.Err(); err != nil && w.bad == "" {
					w.bad = err.Error()
				}
				for _, e := range resp.Events {
					if e.Kv.ModRevision <= w.lastRev && w.bad == "" {
						w.bad = fmt.Sprintf("revision %d after %d", e.Kv.ModRevision, w.lastRev)
					}
					if w.lastRev > 0 && e.Kv.ModRevision != w.lastRev+1 && w.bad == "" {
						w.bad = fmt.Sprintf("revision %d after %d: a gap", e.Kv.ModRevision, w.lastRev)
					}
					w.lastRev = e.Kv.ModRevision
					w.events.Add(1)
				}
			}
			if first {
				started.Done()
			}
		}(c, w)
	}
	started.Wait()
	wcli, err := newClient([]string{leader.Endpoint})
	if err != nil {
		return nil, err
	}
	clients = append(clients, wcli)
	value := strings.Repeat("v", s.ValSize)
	pws := make([]*ProcWatch, 3)
	for i, m := range members {
		pws[i] = StartProcWatch(m.Pid())
	}
	t0 := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(s.Rate))
	var writes atomic.Int64
	var werr atomic.Value
	sem := make(chan struct{}, 64)
	var pw sync.WaitGroup
	for i := 0; time.Since(t0) < s.Duration; i++ {
		<-tick.C
		sem <- struct{}{}
		pw.Add(1)
		go func(i int) {
			defer pw.Done()
			defer func() { <-sem }()
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := wcli.Put(c, fmt.Sprintf("%sns/pod-%06d", prefix, i%10000), value); err != nil {
				werr.Store(err)
				return
			}
			writes.Add(1)
		}(i)
	}
	tick.Stop()
	pw.Wait()
	res.Seconds = time.Since(t0).Seconds()
	res.Writes = writes.Load()
	uses := make([]ProcUsage, 3)
	for i := range pws {
		uses[i] = pws[i].Stop()
	}
	if e := werr.Load(); e != nil {
		return nil, fmt.Errorf("a put failed: %v", e)
	}
	// Every watcher gets every write: wait for the last events (at most 30 s).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		done := true
		for _, w := range watchers {
			done = done && w.events.Load() >= res.Writes
		}
		if done {
			break
		}
	}
	wcancel()
	wg.Wait()
	if res.Writes > 0 {
		res.LeaderCPUPerWriteUs = uses[0].CPUMicros / float64(res.Writes)
		for _, u := range uses[1:] {
			res.FollowersCPUPerWriteUs = append(res.FollowersCPUPerWriteUs, u.CPUMicros/float64(res.Writes))
		}
	}
	res.MinEvents = -1
	for _, w := range watchers {
		n := w.events.Load()
		res.EventsPerWatcher = append(res.EventsPerWatcher, n)
		if res.MinEvents < 0 || n < res.MinEvents {
			res.MinEvents = n
		}
		why := w.bad
		if why == "" && n != res.Writes {
			why = fmt.Sprintf("%d events for %d writes", n, res.Writes)
		}
		if why != "" {
			res.Violations++
			if res.FirstViolation == "" {
				res.FirstViolation = why
			}
		}
	}
	res.Watchers = len(watchers)
	s.logf("%s round %d: %d writes in %.1f s; leader %.1f µs CPU per write; watchers %v; violations %d",
		placement, round, res.Writes, res.Seconds, res.LeaderCPUPerWriteUs, res.PerMember, res.Violations)
	return res, nil
}

// FanoutMedian is one placement's medians over its rounds.
type FanoutMedian struct {
	Placement           string  `json:"placement"`
	Runs                int     `json:"runs"`
	LeaderCPUPerWriteUs float64 `json:"leader_cpu_us_per_write"`
	Violations          int     `json:"violations_all_runs"`
}

// FanoutMedians answers each placement's median leader CPU per write.
func FanoutMedians(runs []*FanoutRun) []FanoutMedian {
	by := map[string][]float64{}
	viol := map[string]int{}
	for _, r := range runs {
		by[r.Placement] = append(by[r.Placement], r.LeaderCPUPerWriteUs)
		viol[r.Placement] += r.Violations
	}
	var out []FanoutMedian
	for _, p := range FanoutPlacements {
		v := by[p]
		if len(v) == 0 {
			continue
		}
		sort.Float64s(v)
		out = append(out, FanoutMedian{Placement: p, Runs: len(v), LeaderCPUPerWriteUs: v[len(v)/2], Violations: viol[p]})
	}
	return out
}
