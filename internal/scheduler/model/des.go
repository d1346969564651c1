package model

import (
	"container/heap"
	"math"
)

// The event engine: a binary heap (container/heap) of events ordered by time, ties broken by
// insertion order so a run is deterministic. Events are plain values (no pointers, no
// interfaces per event): push appends and calls heap.Fix, pop moves the last element to the
// root and calls heap.Fix, so the hot path never boxes an event into an `any` and allocates
// only when the heap's backing array grows.

// what an event is.
const (
	evDone   uint8 = iota // a job finished on its station
	evArrive              // a message reached its destination (job.kind says which)
)

// job is a unit of work on a station or a message in flight; the same value travels through the
// pipeline, its kind saying what happens next.
type job struct {
	kind  uint8   // kEncode… (work) or mFrameRelay… (message)
	what  uint8   // evDone or evArrive when it sits in the event queue
	phase uint8   // attempt phase it belongs to (bumped by widening), proposals only
	flags uint8   // fSampled: a proposal of a sampled phase (decrements the shard's load)
	st    int32   // station it runs on (work) or target node (messages, see aux)
	att   int32   // attempt index (−1 for commits and binds, which outlive their attempt)
	n     int32   // pods (eval, commit, api) or proposals (propose) it stands for
	aux   int32   // node id: shard s (< S) or relay S+r; −1 when it does not apply
	dur   float64 // service time in µs, noise included
	t0    float64 // first send of the pods' attempt, for latency
}

const fSampled uint8 = 1

type event struct {
	t   float64
	seq uint64
	j   job
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(a, b int) bool {
	if q[a].t != q[b].t {
		return q[a].t < q[b].t
	}
	return q[a].seq < q[b].seq
}
func (q eventQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }

// Push and Pop satisfy heap.Interface; the engine itself uses append/Fix (see above).
func (q *eventQueue) Push(x any) { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type engine struct {
	now    float64
	seq    uint64
	q      eventQueue
	events int64
}

// at schedules j to happen at time t (never before now).
func (e *engine) at(t float64, what uint8, j job) {
	if t < e.now {
		t = e.now // guards against float rounding only; no caller schedules into the past
	}
	e.seq++
	j.what = what
	e.q = append(e.q, event{t: t, seq: e.seq, j: j})
	heap.Fix(&e.q, len(e.q)-1)
}

// next pops the earliest event and advances the clock to it.
func (e *engine) next() (job, bool) {
	n := len(e.q)
	if n == 0 {
		return job{}, false
	}
	ev := e.q[0]
	e.q[0] = e.q[n-1]
	e.q = e.q[:n-1]
	if n > 1 {
		heap.Fix(&e.q, 0)
	}
	e.now = ev.t
	e.events++
	return ev.j, true
}

// ring is a FIFO queue on a growable circular buffer.
type ring[T any] struct {
	buf     []T
	head, n int
}

func (r *ring[T]) push(x T) {
	if r.n == len(r.buf) {
		nb := make([]T, max(8, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = x
	r.n++
}

func (r *ring[T]) pop() T {
	x := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return x
}

// Stages a station belongs to, for accounting.
const (
	stCollectors = iota
	stRelays
	stShards
	stAPI
	numStages
)

var stageNames = [numStages]string{"collectors", "relays", "shards", "apiserver"}

// station is one component with its own concurrency: a collector or relay (1) or a shard (K)
// or, in a shared pool, the fake apiserver.
//
// With dedicated cores (no pool) it keeps each worker's next free time and books a job the
// moment it arrives: a FIFO station whose jobs are assigned to the earliest-free worker starts
// each job at max(arrival, earliest free), which depends only on earlier arrivals, so booking
// on arrival is exact and needs no start events. With a pool it queues jobs itself until it
// has a free slot, then hands them to the pool's FIFO of ready jobs.
type station struct {
	stage   int
	conc    int32
	running int32     // pool: jobs it handed to the pool (ready or on a core)
	active  int32     // pool: jobs on a core
	free    []float64 // dedicated: per-worker next free time
	gaps    []float64 // aggregated path, shards only: per worker the idle gap [from, to) left in front of an all-frame booked ahead of time
	queue   ring[job] // pool: jobs waiting for one of its slots
	busy    float64   // µs of CPU consumed (noise, stalls and redos included)
}

// book finds the earliest-free worker of a dedicated station for a job arriving at t; it
// returns the job's start, the worker, and whether another worker is still busy at that start
// (a concurrent job, for collisions): the others are busy past the start exactly when the
// latest free time exceeds it (if the latest were the chosen worker's, all would be equal).
//
// It is the innermost loop of the aggregated "all" path (once per shard per frame), so it is
// branchless: free times are ≥ 0, and non-negative float64s order like their bits as int64, so
// min, argmin and max are kept with sign masks instead of unpredictable branches (2.5× faster).
func (s *station) book(t float64) (start float64, w int, others bool) {
	lo := int64(math.Float64bits(s.free[0]))
	hi, wi := lo, int64(0)
	for i := 1; i < len(s.free); i++ {
		f := int64(math.Float64bits(s.free[i]))
		less := (f - lo) >> 63 // all ones when f < lo
		lo ^= (lo ^ f) & less
		wi ^= (wi ^ int64(i)) & less
		more := (hi - f) >> 63 // all ones when f > hi
		hi ^= (hi ^ f) & more
	}
	start = max(t, math.Float64frombits(uint64(lo)))
	return start, int(wi), math.Float64frombits(uint64(hi)) > start
}

// fit finds the earliest start ≥ t at which a job of dur fits into a worker's gap.
func (s *station) fit(t, dur float64) (start float64, w int, ok bool) {
	for i := 0; i < len(s.gaps); i += 2 {
		if b := max(t, s.gaps[i]); b+dur <= s.gaps[i+1] && (!ok || b < start) {
			start, w, ok = b, i/2, true
		}
	}
	return start, w, ok
}

// busyAt reports whether a worker other than w is running something at t: it is booked past t
// and t is not inside its gap.
func (s *station) busyAt(t float64, w int) bool {
	for i, f := range s.free {
		if i != w && f > t && !(s.gaps != nil && s.gaps[2*i] <= t && t < s.gaps[2*i+1]) {
			return true
		}
	}
	return false
}

// pool is the shared CPU pool: a FIFO of ready jobs and a count of idle cores.
type pool struct {
	idle  int
	ready ring[job]
}
