package model

import "math"

// The aggregated path for frames that go to all S shards with dedicated cores.
//
// Simulating them hop by hop costs O(S) events per frame (256M evaluations for 1M pods on 256
// shards). Instead a frame costs two loops over the tree and the shards and a handful of events:
//
//   - Relays (scatterAll, when the frame leaves its collector): a frame enters the tree only at
//     the root, and the root takes frames in the order they arrive (events are processed in
//     time order). A relay is a single FIFO core, so frames leave it, to every child, in the
//     same order and at increasing times; by induction every relay and every shard receives
//     all-frames in root order, and relays receive nothing else. So booking each relay's hops
//     (one per child, back to back, each with its own noise) at root entry gives the times the
//     hop-by-hop simulation would: exact.
//   - Shards (leaves, one event when the first shard receives the frame): every shard books the
//     evaluation at its own arrival time on its earliest-free worker. Exact between all-frames.
//     Against a shard's other arrivals (commits, and sampled frames when AllFraction or
//     WidenFraction mix modes), which are booked when they arrive, it is exact except in the
//     window between the first shard's and this shard's arrival of the frame (the spread of
//     leaf arrivals: relay positions, up to depth·F·HopUs, plus relay stalls): a commit
//     arriving there is served after the frame, a FIFO inversion that delays it by about one
//     evaluation / K and leaves the CPU unchanged. Booking at root entry instead made that
//     window a whole tree traversal and put commits behind every frame still in the tree,
//     which was visible (+15% latency against the exact path).
//     A worker left idle in front of such a frame remembers the gap, and a job booked on
//     arrival that fits into it is served there (station.fit), which removes the inversion
//     whenever the gap is long enough.
//   - Collector: instead of S proposal jobs, at most maxChunks+1: the interval from the first to
//     the k-th (k = ⌈Fraction·S⌉) answer is cut into maxChunks (4) equal parts, and the answers
//     arriving in each part are one collector job at the part's end (the k-th answer's part is
//     followed by the decision); the S−k stragglers are one job when the last arrives. The CPU
//     is exactly S·ProposalUs (noise: see noise.services); an answer is handled at most 1/4 of
//     the spread of the answers after it arrived, so the decision can be late by that, or by
//     the handling of one part's answers, which the collector takes up only when the part ends.
//
// Input.Exact turns this off; TestAggregatedMatchesExact keeps the two paths within a few %.

// answer is one shard's proposal arrival at the collector.
type answer struct {
	t     float64
	shard int32
}

// scatterAll books attempt id's all-frame (leaving its collector now) down the relay tree,
// keeps each shard's arrival time, and schedules the booking at the shards (leaves) for when
// the first shard receives it.
func (m *sim) scatterAll(id int32) {
	L, S := m.in.HopLatencyUs, m.S
	arr := m.arr
	arr[m.tree.root()] = m.now + L
	for r := m.tree.relays - 1; r >= 0; r-- {
		s := &m.st[m.firstRelay+r]
		t := max(arr[S+r], s.free[0])
		first := m.tree.first[r]
		for c := first; c < first+m.tree.kids[r]; c++ {
			d := m.noise.service(m.in.HopUs)
			t += d
			s.busy += d
			arr[c] = t + L
		}
		s.free[0] = t
	}
	var leaf []float64
	if n := len(m.leafBufs); n > 0 {
		leaf, m.leafBufs = m.leafBufs[n-1], m.leafBufs[:n-1]
	} else {
		leaf = make([]float64, S)
	}
	copy(leaf, arr[:S])
	m.atts[id].leaf = leaf
	// The first shard to receive the frame is the first child of a bottom relay (a relay
	// sends to its children in order).
	t := math.Inf(1)
	for r := range m.tree.bottom {
		t = min(t, leaf[m.tree.first[r]])
	}
	m.at(t, evArrive, job{kind: mLeaves, att: id, phase: m.atts[id].phase})
}

// leaves books attempt id's evaluations at every shard, at the times the frame reaches them
// (all ≥ now), and schedules the aggregated proposal arrivals.
func (m *sim) leaves(id int32) {
	a := &m.atts[id]
	L, S := m.in.HopLatencyUs, m.S
	base := m.in.evalUs(int(a.pods))
	ans := m.answers
	first, last := math.Inf(1), math.Inf(-1) // earliest and latest answer
	for sh, t := range a.leaf {
		start, dur := m.bookAt(&m.st[m.firstShard+sh], t, m.noise.service(base), true, true)
		at := start + dur + L
		ans[sh] = answer{t: at, shard: int32(sh)}
		first, last = min(first, at), max(last, at)
	}
	m.leafBufs = append(m.leafBufs, a.leaf)
	a.leaf = nil

	// The k answers the decision waits for are handled in up to maxChunks groups: the time
	// from the first of them to the k-th is cut into maxChunks equal intervals, and each
	// interval's answers are one collector job at the interval's end.
	k := int(a.needed)
	kth := last
	if k == S {
		a.anyShard = true
	} else {
		selectK(ans, k)
		kth = ans[k-1].t
		for _, x := range ans[:k] {
			a.answers = append(a.answers, x.shard)
		}
	}
	var counts [maxChunks]int32
	width := (kth - first) / maxChunks
	if width > 0 {
		inv := 1 / width
		for _, x := range ans[:k] {
			counts[min(int((x.t-first)*inv), maxChunks-1)]++
		}
	} else {
		counts[maxChunks-1] = int32(k)
	}
	for b, n := range counts {
		if n > 0 {
			t := kth
			if b < maxChunks-1 {
				t = first + float64(b+1)*width
			}
			m.at(t, evArrive, job{kind: mProposal, att: id, phase: a.phase, n: n, aux: -1})
		}
	}
	if k < S {
		m.at(last, evArrive, job{kind: mProposal, att: id, phase: a.phase, n: int32(S - k), aux: -1})
	}
}

// maxChunks bounds the collector jobs an aggregated all-frame's answers become: more chunks
// follow the arrivals more closely (the collector handles early answers while waiting for late
// ones) at two events each. Against the exact path (32 shards, collector half busy, noise and
// stalls), 1 chunk put the makespan 12% high; 2, 4 and 8 were within the seed-to-seed noise
// (4–5%), and 4 instead of 8 makes a 1M-pod scatter-all run about 20% faster.
const maxChunks = 4

// selectK reorders a so that a[k-1] is the k-th earliest answer, a[:k-1] are no later and
// a[k:] no earlier (Hoare's selection, O(len(a)) on average).
func selectK(a []answer, k int) {
	lo, hi := 0, len(a)-1
	for lo < hi {
		p := a[lo+(hi-lo)/2].t
		i, j := lo, hi
		for i <= j {
			for a[i].t < p {
				i++
			}
			for a[j].t > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}
