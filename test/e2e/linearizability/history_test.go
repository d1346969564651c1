// Package linearizability runs concurrent etcd clients against the real meganode-store
// binary (and once against real etcd), records every call with its call and return
// time, and checks the history: porcupine against a per-key KV model of etcd, the
// real-time order of revisions, the consistency of every read with the store's
// revision order, and the watch streams. See README.md.
package linearizability

import (
	"fmt"
	"math"
	"strings"
)

type opKind uint8

const (
	opGet       opKind = iota // linearizable Range of one key
	opGetSerial               // serializable Range of one key
	opPut
	opDelete
	opTxn   // kube-apiserver's update: If(ModRevision(k) == Expect).Then(Put(k, Value)).Else(Get(k))
	opRange // Range over the test prefix
)

func (k opKind) String() string {
	return [...]string{"get", "get-serializable", "put", "delete", "txn", "range"}[k]
}

// unknownReturn is the return time of an operation whose outcome is unknown
// (timeout, connection lost, store killed): porcupine may place it anywhere
// after its call, including after everything else (= it never took effect).
const unknownReturn = math.MaxInt64

// KV is one key as a read returned it.
type KV struct {
	Key, Value string
	ModRev     int64
}

// Op is one client call and, unless Err is set, its outcome.
type Op struct {
	Client int
	Kind   opKind
	Key    string // the key; for opRange the prefix
	Value  string // opPut, opTxn: the value written (unique in the history)
	Expect int64  // opTxn: the expected mod revision
	Call   int64  // ns since the start of the run
	Return int64  // ns since the start; unknownReturn when Err != ""
	Err    string // the call failed: for a write the outcome is unknown; failed reads are dropped

	Rev       int64 // the response header's revision
	Found     bool  // opGet*, opTxn (else branch): the key exists
	Got       KV    // opGet*, opTxn (else branch): the key as read
	Succeeded bool  // opTxn
	Deleted   int64 // opDelete
	KVs       []KV  // opRange
}

func (o *Op) unknown() bool { return o.Err != "" }

// isWrite: the op may change the store.
func (o *Op) isWrite() bool { return o.Kind == opPut || o.Kind == opDelete || o.Kind == opTxn }

// tookRev: the op is acknowledged and created a new revision.
func (o *Op) tookRev() bool {
	if o.unknown() {
		return false
	}
	switch o.Kind {
	case opPut:
		return true
	case opTxn:
		return o.Succeeded
	case opDelete:
		return o.Deleted > 0
	}
	return false
}

func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c%d %s(%s", o.Client, o.Kind, o.Key)
	switch o.Kind {
	case opPut:
		fmt.Fprintf(&b, ", %q", o.Value)
	case opTxn:
		fmt.Fprintf(&b, ", modrev==%d ? put %q : get", o.Expect, o.Value)
	}
	ret := "?"
	if o.Return != unknownReturn {
		ret = fmt.Sprintf("%.6f", float64(o.Return)/1e9)
	}
	fmt.Fprintf(&b, ") [%.6f, %s] -> ", float64(o.Call)/1e9, ret)
	if o.unknown() {
		fmt.Fprintf(&b, "unknown (%s)", o.Err)
		return b.String()
	}
	fmt.Fprintf(&b, "rev %d", o.Rev)
	switch o.Kind {
	case opGet, opGetSerial:
		b.WriteString(" " + foundString(o.Found, o.Got))
	case opTxn:
		if o.Succeeded {
			b.WriteString(" succeeded")
		} else {
			b.WriteString(" failed, " + foundString(o.Found, o.Got))
		}
	case opDelete:
		fmt.Fprintf(&b, " deleted %d", o.Deleted)
	case opRange:
		fmt.Fprintf(&b, " %d kvs", len(o.KVs))
	}
	return b.String()
}

func foundString(found bool, kv KV) string {
	if !found {
		return "not found"
	}
	return fmt.Sprintf("%q@%d", kv.Value, kv.ModRev)
}

// Event is one watch event.
// rangeOf calls f for each of keys with what the range op o returned for it (ok false: absent).
func (o *Op) rangeOf(keys []string, f func(k string, kv KV, ok bool)) {
	got := map[string]KV{}
	for _, kv := range o.KVs {
		got[kv.Key] = kv
	}
	for _, k := range keys {
		kv, ok := got[k]
		f(k, kv, ok)
	}
}

type Event struct {
	Key, Value string
	Delete     bool
	ModRev     int64
}

func (e Event) String() string {
	if e.Delete {
		return fmt.Sprintf("DELETE %s@%d", e.Key, e.ModRev)
	}
	return fmt.Sprintf("PUT %s=%q@%d", e.Key, e.Value, e.ModRev)
}

// WatchLog is what one watcher (from revision 1, resumed by the client after
// connection loss) delivered, in delivery order.
type WatchLog struct {
	Name   string
	Events []Event
}

// History is one run.
type History struct {
	Keys    []string // the key universe (every key lies under Prefix)
	Prefix  string
	Ops     []Op
	Watches []WatchLog
	// Final: every event under Prefix from revision 1, read by a fresh watcher after
	// the load (and after the last restart): the store's own account of its writes.
	Final []Event
	// Restarts: when the store was SIGKILLed (ns since the start), how long it took
	// to serve again, and the revision it resumed at.
	Restarts []Restart
}

type Restart struct {
	At, Took int64
	// Resume: the header revision of a read on the restarted store before any
	// client could reach it; every revision handed out before the kill is <= it.
	Resume int64
}
