package linearizability

import (
	"fmt"
	"sort"
	"time"
)

// Report is the verdict on one history.
type Report struct {
	Violations []string
}

func (r *Report) add(check string, v []string) {
	for _, s := range v {
		r.Violations = append(r.Violations, check+": "+s)
	}
}

// checkHistory runs every check.
func checkHistory(h *History, porcupineTimeout time.Duration) Report {
	var r Report
	r.add("linearizable", checkPorcupine(h, porcupineTimeout))
	r.add("write-order", checkWriteOrder(h))
	r.add("read-revision", checkHeaderOrder(h))
	r.add("final-history", checkFinal(h))
	r.add("reads-vs-revisions", checkReadsAgainstRevisions(h))
	r.add("watch", checkWatches(h))
	return r
}

const maxReported = 8

func capped(v []string) []string {
	if len(v) > maxReported {
		return append(v[:maxReported:maxReported], fmt.Sprintf("... and %d more", len(v)-maxReported))
	}
	return v
}

// realTimeFloor returns, for a later op b, the highest value of f among ops that
// returned before b was called (0 if none).
type realTimeFloor struct {
	ret  []int64 // return times, ascending
	maxF []int64 // running maximum of f
	who  []*Op
}

func newFloor(ops []*Op, f func(*Op) int64) *realTimeFloor {
	sorted := append([]*Op(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Return < sorted[j].Return })
	fl := &realTimeFloor{}
	var m int64
	var w *Op
	for _, o := range sorted {
		if v := f(o); v > m {
			m, w = v, o
		}
		fl.ret, fl.maxF, fl.who = append(fl.ret, o.Return), append(fl.maxF, m), append(fl.who, w)
	}
	return fl
}

func (fl *realTimeFloor) before(call int64) (int64, *Op) {
	i := sort.Search(len(fl.ret), func(i int) bool { return fl.ret[i] >= call })
	if i == 0 {
		return 0, nil
	}
	return fl.maxF[i-1], fl.who[i-1]
}

func acked(h *History) []*Op {
	var out []*Op
	for i := range h.Ops {
		if !h.Ops[i].unknown() {
			out = append(out, &h.Ops[i])
		}
	}
	return out
}

// checkWriteOrder: a write that returned before another began has a lower revision.
func checkWriteOrder(h *History) []string {
	var writes []*Op
	for _, o := range acked(h) {
		if o.tookRev() {
			writes = append(writes, o)
		}
	}
	fl := newFloor(writes, func(o *Op) int64 { return o.Rev })
	var v []string
	for _, o := range writes {
		if m, w := fl.before(o.Call); m >= o.Rev {
			v = append(v, fmt.Sprintf("%s began after %s returned", o, w))
		}
	}
	return capped(v)
}

// checkHeaderOrder: no response carries a header revision older than one already
// returned before its call began.
func checkHeaderOrder(h *History) []string {
	ops := acked(h)
	fl := newFloor(ops, func(o *Op) int64 { return o.Rev })
	var v []string
	for _, o := range ops {
		if m, w := fl.before(o.Call); m > o.Rev {
			v = append(v, fmt.Sprintf("%s began after %s returned", o, w))
		}
	}
	return capped(v)
}

// writesByValue maps each put/txn value (unique) to its op, and each key to its deletes.
func writesByValue(h *History) (map[string]*Op, map[string][]*Op) {
	byValue, deletes := map[string]*Op{}, map[string][]*Op{}
	for i := range h.Ops {
		o := &h.Ops[i]
		switch o.Kind {
		case opPut, opTxn:
			byValue[o.Value] = o
		case opDelete:
			deletes[o.Key] = append(deletes[o.Key], o)
		}
	}
	return byValue, deletes
}

// checkFinal: the store's own history (a watch from revision 1 after the load)
// holds every acknowledged write exactly once at its revision, in revision
// order, and nothing else but writes of unknown outcome.
func checkFinal(h *History) []string {
	byValue, deletes := writesByValue(h)
	var v []string
	seenValue := map[string]bool{}
	seenDelete := map[*Op]bool{}
	var last int64
	for _, e := range h.Final {
		if e.ModRev <= last {
			v = append(v, fmt.Sprintf("event %s after revision %d", e, last))
		}
		last = e.ModRev
		if e.Delete {
			var match *Op
			for _, d := range deletes[e.Key] {
				if !seenDelete[d] && (d.unknown() || (d.Deleted > 0 && d.Rev == e.ModRev)) {
					if match == nil || (!d.unknown() && match.unknown()) {
						match = d
					}
				}
			}
			if match == nil {
				v = append(v, fmt.Sprintf("event %s matches no acknowledged or unknown delete", e))
				continue
			}
			seenDelete[match] = true
			continue
		}
		o := byValue[e.Value]
		switch {
		case o == nil || o.Key != e.Key:
			v = append(v, fmt.Sprintf("event %s: no such write was issued", e))
		case seenValue[e.Value]:
			v = append(v, fmt.Sprintf("event %s: the write %s appears twice", e, o))
		case o.unknown():
		case o.Kind == opTxn && !o.Succeeded:
			v = append(v, fmt.Sprintf("event %s for a txn that answered 'compare failed': %s", e, o))
		case o.Rev != e.ModRev:
			v = append(v, fmt.Sprintf("event %s at another revision than acknowledged: %s", e, o))
		}
		seenValue[e.Value] = true
	}
	for _, o := range acked(h) {
		if !o.tookRev() {
			continue
		}
		if o.Kind == opDelete && !seenDelete[o] || o.Kind != opDelete && !seenValue[o.Value] {
			v = append(v, fmt.Sprintf("acknowledged write missing from the store's history: %s", o))
		}
	}
	return capped(v)
}

// keyTimeline is one key's versions in revision order, from the final history.
type keyTimeline []Event

// at returns the key's version at revision rev.
func (t keyTimeline) at(rev int64) (KV, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].ModRev > rev })
	if i == 0 || t[i-1].Delete {
		return KV{}, false
	}
	e := t[i-1]
	return KV{Key: e.Key, Value: e.Value, ModRev: e.ModRev}, true
}

// checkReadsAgainstRevisions: the store's revision order is a serial order that
// explains every read: a read with header revision H returns exactly the state
// after the writes <= H (a Range: of every key at once; a delete that deleted
// nothing: the key was absent); a txn's compare is
// evaluated on the state just before its revision (succeeded) or at its header
// (failed).
func checkReadsAgainstRevisions(h *History) []string {
	tl := map[string]keyTimeline{}
	for _, e := range h.Final {
		tl[e.Key] = append(tl[e.Key], e)
	}
	var v []string
	expect := func(o *Op, key string, rev int64, found bool, got KV) {
		want, ok := tl[key].at(rev)
		if ok != found || found && want != got {
			v = append(v, fmt.Sprintf("%s: %s at revision %d was %s, the read returned %s", o, key, rev,
				foundString(ok, want), foundString(found, got)))
		}
	}
	for _, o := range acked(h) {
		switch o.Kind {
		case opGet, opGetSerial:
			expect(o, o.Key, o.Rev, o.Found, o.Got)
		case opRange:
			o.rangeOf(h.Keys, func(k string, kv KV, ok bool) { expect(o, k, o.Rev, ok, kv) })
		case opDelete:
			if o.Deleted == 0 { // the key was absent at the header's revision
				expect(o, o.Key, o.Rev, false, KV{})
			}
		case opTxn:
			if o.Succeeded {
				prev, ok := tl[o.Key].at(o.Rev - 1)
				if !ok {
					prev.ModRev = 0
				}
				if prev.ModRev != o.Expect {
					v = append(v, fmt.Sprintf("%s: compare succeeded but %s's mod revision at %d was %d", o, o.Key, o.Rev-1, prev.ModRev))
				}
			} else {
				expect(o, o.Key, o.Rev, o.Found, o.Got)
			}
		}
	}
	return capped(v)
}

// checkWatches: every watcher delivered exactly the store's history, in order,
// without gaps or duplicates, up to the end of the run; an event a watcher saw
// that is not in the final history is a write that vanished.
func checkWatches(h *History) []string {
	var v []string
	var lastFinal int64
	if n := len(h.Final); n > 0 {
		lastFinal = h.Final[n-1].ModRev
	}
	for _, w := range h.Watches {
		for i, e := range w.Events {
			if i >= len(h.Final) {
				v = append(v, fmt.Sprintf("%s: event %d %s beyond the store's history (%d events)", w.Name, i, e, len(h.Final)))
				break
			}
			if f := h.Final[i]; f != e {
				v = append(v, fmt.Sprintf("%s: event %d is %s, the store's history has %s there", w.Name, i, e, f))
				break
			}
		}
		if len(w.Events) < len(h.Final) {
			v = append(v, fmt.Sprintf("%s: delivered %d of %d events (up to revision %d)", w.Name, len(w.Events), len(h.Final), lastFinal))
		}
	}
	return capped(v)
}
