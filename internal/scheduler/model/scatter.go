package model

import "slices"

// tree is the relay tree over S shards: level 1 has ⌈S/F⌉ relays of at most F shards each,
// each next level ⌈previous/F⌉ relays, up to one root (the shape of scheduler.TreeShape).
//
// Nodes are numbered shards first (0…S−1), then relays level by level from the bottom
// (S…S+R−1), so the root is the last node and every relay's number is larger than its
// children's: walking relays from the last to the first visits parents before children.
type tree struct {
	shards, relays, depth int
	bottom                int     // relays of the bottom level (parents of shards): relays 0…bottom−1
	first                 []int32 // per relay: node number of its first child
	kids                  []int32 // per relay: how many children (consecutive node numbers)
}

func newTree(shards, fanout int) tree {
	t := tree{shards: shards}
	below, count := 0, shards // first node and size of the level below
	for {
		n := (count + fanout - 1) / fanout
		for j := range n {
			t.first = append(t.first, int32(below+j*fanout))
			t.kids = append(t.kids, int32(min(fanout, count-j*fanout)))
		}
		if t.depth == 0 {
			t.bottom = n
		}
		below, count = shards+t.relays, n
		t.relays += n
		t.depth++
		if n <= 1 {
			return t
		}
	}
}

func (t tree) root() int { return t.shards + t.relays - 1 }

// relay (exact path): a frame reached relay node j.aux; it queues one hop job per child, which
// its single core runs back to back, so child i's copy leaves after i+1 hops of CPU.
func (m *sim) relay(j job) {
	r := int(j.aux) - m.S
	first := m.tree.first[r]
	for c := first; c < first+m.tree.kids[r]; c++ {
		m.submit(job{kind: kHop, st: int32(m.firstRelay + r), att: j.att, phase: j.phase, n: j.n, aux: c,
			dur: m.noise.service(m.in.HopUs)})
	}
}

// forward delivers a hop's frame to its child node at t.
func (m *sim) forward(j job, t float64) {
	kind := mFrameRelay
	if int(j.aux) < m.S {
		kind = mFrameShard
	}
	m.at(t, evArrive, job{kind: kind, att: j.att, phase: j.phase, n: j.n, aux: j.aux})
}

// pickShards chooses d distinct shards for a sampled frame by power of two choices: for each
// slot, two random distinct shards not chosen yet, keeping the one with fewer sampled pods sent
// to it and not yet answered (ties: the first drawn).
//
// Approximation: the load is the exact global count; a real collector knows only its own
// frames (or stale load reports), which balances less well when C is large. Frames going to all
// shards are not counted: they load every shard equally and do not change the comparison.
func (m *sim) pickShards(d int) []int32 {
	p := m.targets[:0]
	if d >= m.S {
		for s := range m.S {
			p = append(p, int32(s))
		}
		m.targets = p
		return p
	}
	for range d {
		a := m.unchosen(p)
		if m.S-len(p) >= 2 {
			b := m.unchosen(p)
			for b == a {
				b = m.unchosen(p)
			}
			if m.load[b] < m.load[a] {
				a = b
			}
		}
		p = append(p, a)
	}
	m.targets = p
	return p
}

// unchosen draws a uniformly random shard not in p (rejection: p holds at most d < S shards).
func (m *sim) unchosen(p []int32) int32 {
	for {
		s := int32(m.rng.IntN(m.S))
		if !slices.Contains(p, s) {
			return s
		}
	}
}
