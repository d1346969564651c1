package linearizability

import "sort"

// A store that shows a write before it is durable lets a read or a watch event
// observe a write that a SIGKILL then loses (found by this test, fixed: see
// README.md). Such an observation fails the checks like any other; these windows
// are logged to say where a failure of that kind would lie.
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
