package linearizability

import (
	"strings"
	"testing"
	"time"
)

// Unit tests of the checker on hand-written histories: it accepts what etcd may
// do (including writes of unknown outcome landing or not) and rejects planted bugs.

const ms = int64(time.Millisecond)

var kA = testPrefix + "a"

func hist(ops []Op, final []Event, watches ...WatchLog) *History {
	return &History{Keys: []string{kA, testPrefix + "b"}, Prefix: testPrefix, Ops: ops, Final: final, Watches: watches}
}

func put(c int, call, ret int64, v string, rev int64) Op {
	return Op{Client: c, Kind: opPut, Key: kA, Value: v, Call: call * ms, Return: ret * ms, Rev: rev}
}

func get(c int, call, ret int64, rev int64, v string, mod int64) Op {
	o := Op{Client: c, Kind: opGet, Key: kA, Call: call * ms, Return: ret * ms, Rev: rev}
	if v != "" {
		o.Found, o.Got = true, KV{Key: kA, Value: v, ModRev: mod}
	}
	return o
}

func lost(o Op) Op { o.Err, o.Return, o.Rev = "context deadline exceeded", unknownReturn, 0; return o }

func ev(v string, rev int64) Event { return Event{Key: kA, Value: v, ModRev: rev} }

func violations(t *testing.T, h *History) []string {
	t.Helper()
	return checkHistory(h, 10*time.Second).Violations
}

func wantClean(t *testing.T, h *History) {
	t.Helper()
	if v := violations(t, h); len(v) > 0 {
		t.Fatalf("a valid history was rejected:\n%s", strings.Join(v, "\n"))
	}
}

// wantCaught: every named check must object.
func wantCaught(t *testing.T, h *History, checks ...string) {
	t.Helper()
	v := violations(t, h)
	for _, c := range checks {
		found := false
		for _, s := range v {
			found = found || strings.HasPrefix(s, c+":")
		}
		if !found {
			t.Errorf("check %q did not object; violations:\n%s", c, strings.Join(v, "\n"))
		}
	}
	if !t.Failed() {
		t.Logf("caught:\n%s", strings.Join(v, "\n"))
	}
}

func TestCheckerAcceptsValidHistory(t *testing.T) {
	txn := Op{Client: 1, Kind: opTxn, Key: kA, Value: "v3", Expect: 3, Call: 40 * ms, Return: 45 * ms, Rev: 4, Succeeded: true}
	stale := Op{Client: 2, Kind: opTxn, Key: kA, Value: "v4", Expect: 2, Call: 50 * ms, Return: 55 * ms, Rev: 4,
		Found: true, Got: KV{Key: kA, Value: "v3", ModRev: 4}}
	rng := Op{Client: 0, Kind: opRange, Key: testPrefix, Call: 60 * ms, Return: 61 * ms, Rev: 4, KVs: []KV{{kA, "v3", 4}}}
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		get(1, 5, 8, 1, "", 0), // concurrent with the put: may miss it
		put(0, 20, 30, "v2", 3),
		get(1, 25, 35, 3, "v2", 3),
		txn, stale, rng,
		lost(put(2, 70, 0, "v5", 0)), // unknown outcome, never seen: may never have happened
	}
	final := []Event{ev("v1", 2), ev("v2", 3), ev("v3", 4)}
	wantClean(t, hist(ops, final, WatchLog{Name: "w", Events: final}))
}

func TestCheckerAcceptsUnknownWriteThatLanded(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		lost(put(1, 20, 0, "v2", 0)), // the client timed out, but the write happened at 3
		get(2, 100, 110, 3, "v2", 3),
	}
	wantClean(t, hist(ops, []Event{ev("v1", 2), ev("v2", 3)}))
}

// A read answered from a cache: it returns the old value after a newer write returned.
func TestCheckerCatchesStaleRead(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		put(0, 20, 30, "v2", 3),
		get(1, 40, 50, 3, "v1", 2), // fresh header, stale value
	}
	final := []Event{ev("v1", 2), ev("v2", 3)}
	wantCaught(t, hist(ops, final), "linearizable", "reads-vs-revisions")
	// The cached response replayed whole: its header is stale too.
	ops[2] = get(1, 40, 50, 2, "v1", 2)
	wantCaught(t, hist(ops, final), "linearizable", "read-revision")
}

// Revisions handed out against real time (a write that began after another
// returned got a lower revision).
func TestCheckerCatchesRevisionOrder(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 3),
		{Client: 1, Kind: opPut, Key: testPrefix + "b", Value: "w1", Call: 20 * ms, Return: 30 * ms, Rev: 2},
	}
	final := []Event{{Key: testPrefix + "b", Value: "w1", ModRev: 2}, ev("v1", 3)}
	wantCaught(t, hist(ops, final), "write-order", "read-revision")
}

// An acknowledged write lost across a restart: after it the key reads as before.
func TestCheckerCatchesLostWriteAcrossRestart(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		put(0, 20, 30, "v2", 3),           // acknowledged, then the store is killed
		lost(put(1, 25, 0, "v3", 0)),      // in flight at the kill
		get(2, 500, 510, 100001, "v1", 2), // after the restart (the revision skipped ahead)
	}
	final := []Event{ev("v1", 2)} // the restarted store's history lacks revision 3
	wantCaught(t, hist(ops, final, WatchLog{Name: "w", Events: []Event{ev("v1", 2), ev("v2", 3)}}),
		"linearizable", "final-history", "watch")
}

// A write of unknown outcome that a reader saw, then vanished in a restart.
func TestCheckerCatchesObservedUnknownWriteThatVanished(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		lost(put(1, 20, 0, "v2", 0)),
		get(2, 25, 30, 3, "v2", 3), // saw it
		get(2, 500, 510, 100001, "v1", 2),
	}
	wantCaught(t, hist(ops, []Event{ev("v1", 2)}), "linearizable", "reads-vs-revisions")
}

func TestCheckerCatchesWatchBugs(t *testing.T) {
	ops := []Op{put(0, 0, 10, "v1", 2), put(0, 20, 30, "v2", 3)}
	final := []Event{ev("v1", 2), ev("v2", 3)}
	for name, w := range map[string][]Event{
		"duplicate": {ev("v1", 2), ev("v1", 2), ev("v2", 3)},
		"reordered": {ev("v2", 3), ev("v1", 2)},
		"gap":       {ev("v2", 3)},
		"missing":   {ev("v1", 2)},
		"phantom":   {ev("v1", 2), ev("v9", 3)},
	} {
		t.Run(name, func(t *testing.T) { wantCaught(t, hist(ops, final, WatchLog{Name: name, Events: w}), "watch") })
	}
	// The store's own history holds a write that nobody issued, or a failed txn's value.
	failed := Op{Client: 1, Kind: opTxn, Key: kA, Value: "t1", Expect: 99, Call: 40 * ms, Return: 45 * ms, Rev: 3,
		Found: true, Got: KV{Key: kA, Value: "v2", ModRev: 3}}
	wantCaught(t, hist(append(ops, failed), append(final, ev("t1", 4), ev("zz", 5))), "final-history")
}

// A txn whose compare was evaluated on a stale mod revision.
func TestCheckerCatchesWrongCompare(t *testing.T) {
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		put(0, 20, 30, "v2", 3),
		{Client: 1, Kind: opTxn, Key: kA, Value: "t1", Expect: 2, Call: 40 * ms, Return: 45 * ms, Rev: 4, Succeeded: true},
	}
	wantCaught(t, hist(ops, []Event{ev("v1", 2), ev("v2", 3), ev("t1", 4)}), "linearizable", "reads-vs-revisions")
}

// A write seen by a read and a watcher before a kill, then lost in it (the
// visible-before-durable bug, README.md), is caught by the reads' and the watch's checks.
func TestCheckerCatchesSeenThenLostInAKill(t *testing.T) {
	restart := []Restart{{At: 100 * ms, Took: 50 * ms, Resume: 100000}}
	ops := []Op{
		put(0, 0, 10, "v1", 2),
		lost(put(1, 20, 0, "v2", 0)),      // revision 3, visible, then lost in the kill at 100 ms
		get(2, 25, 30, 3, "v2", 3),        // saw it
		get(2, 200, 210, 100001, "v1", 2), // after the restart
		put(0, 220, 230, "v3", 100002),
	}
	final := []Event{ev("v1", 2), ev("v3", 100002)}
	w := WatchLog{Name: "w", Events: []Event{ev("v1", 2), ev("v2", 3), ev("v3", 100002)}}
	h := &History{Keys: []string{kA}, Prefix: testPrefix, Ops: ops, Final: final, Watches: []WatchLog{w}, Restarts: restart}
	wantCaught(t, h, "linearizable", "reads-vs-revisions", "watch")
}
