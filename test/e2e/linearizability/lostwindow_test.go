package linearizability

import (
	"fmt"
	"sort"
)

// Known bug (found by this test, see README.md "Known violation"): the store
// publishes a write's revision to readers and watchers inside the sequencer,
// before the write's log records are durable. A read or watch event can therefore
// observe a write that a SIGKILL then loses (the write was in flight, its outcome
// unknown to its client). etcd never shows a write before it is durable.
//
// lostWindows returns, per restart, the revisions the store handed out before the
// kill and lost in it, as (low, high): above the newest revision of the store's
// history that is <= the revision it resumed at, and below that revision (a read
// after the restart may carry it; a lost write could only have it if the killed
// store had handed out the last revision of its reserved block).
func lostWindows(h *History) [][2]int64 {
	var out [][2]int64
	for _, rs := range h.Restarts {
		i := sort.Search(len(h.Final), func(i int) bool { return h.Final[i].ModRev > rs.Resume })
		var last int64
		if i > 0 {
			last = h.Final[i-1].ModRev
		}
		if rs.Resume > last {
			out = append(out, [2]int64{last, rs.Resume})
		}
	}
	return out
}

// excuseVisibleBeforeDurable returns a copy of h without the observations of
// revisions lost in a kill (reads whose header lies in a lost window, watch events
// in one), and a description of each: everything else is still checked strictly,
// including that no acknowledged write was lost.
func excuseVisibleBeforeDurable(h *History) (*History, []string) {
	wins := lostWindows(h)
	lost := func(rev int64) bool {
		for _, w := range wins {
			if rev > w[0] && rev < w[1] {
				return true
			}
		}
		return false
	}
	var excused []string
	out := *h
	out.Ops = nil
	for i := range h.Ops {
		o := h.Ops[i]
		if !o.unknown() && !o.tookRev() && lost(o.Rev) {
			excused = append(excused, fmt.Sprintf("read of a revision the kill lost: %s", &o))
			continue
		}
		out.Ops = append(out.Ops, o)
	}
	out.Watches = nil
	for _, w := range h.Watches {
		nw := WatchLog{Name: w.Name}
		for _, e := range w.Events {
			if lost(e.ModRev) {
				excused = append(excused, fmt.Sprintf("%s: event of a revision the kill lost: %s", w.Name, e))
				continue
			}
			nw.Events = append(nw.Events, e)
		}
		out.Watches = append(out.Watches, nw)
	}
	return &out, excused
}
