package model

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// Job kinds: CPU work on a station.
const (
	kEncode  uint8 = iota // collector: encode b pods into a frame and send it (1 or D hops)
	kResend               // collector: send a widened frame to the root relay (1 hop)
	kHop                  // relay: forward a frame to one child (exact path)
	kEval                 // shard: evaluate a frame
	kPropose              // collector: handle n proposals
	kDecide               // collector: decide an attempt
	kCommit               // shard: commit the n pods it won
	kRelease              // shard: release the n pods or slots it proposed and did not win
	kAPI                  // pool only: the fake apiserver's work for n bound pods
)

// Message kinds: something reaching its destination later (a network hop, the bind rate
// limit, or an aggregated all-frame reaching the shards).
const (
	mFrameRelay uint8 = iota + 16 // frame reaches relay node aux (exact path)
	mFrameShard                   // frame reaches shard aux
	mProposal                     // n proposals of an attempt reach its collector
	mCommit                       // decision reaches winning shard aux: commit n pods
	mRelease                      // decision reaches losing shard aux: release n pods or slots
	mAPI                          // n pods passed the bind rate limit (pool with ApiUs)
	mLeaves                       // aggregated all-frame reaches its first shard: book all shards
)

// attempt is one frame's trip from the intake to the final decision: one pod, or a batch.
type attempt struct {
	coll     int32
	pods     int32
	targets  int32 // shards the current phase went to
	needed   int32 // proposals to handle before deciding
	counted  int32 // proposals of the current phase handled before deciding
	pending  int32 // proposals of all phases not handled yet (the attempt lives until 0)
	phase    uint8 // 0, 1 after widening; stale proposals are charged but not counted
	all      bool  // the current phase goes to all shards
	widened  bool
	deciding bool // decision job queued
	decided  bool // final decision made (slot released)
	anyShard bool // every shard's answer counts (aggregated all-phase with Fraction 1)
	t0       float64
	answers  []int32   // shards whose proposals were counted (winners are drawn from them)
	leaf     []float64 // aggregated path: the frame's arrival time at each shard, until booked
}

// collector is one collector's intake: the pods it still has to send, by class.
type collector struct {
	left     []int32 // pods left per non-empty class
	cursor   int     // round-robin over classes
	inflight int
}

// nextBatch takes the next frame's pods: up to b of the next class in round-robin order.
func (c *collector) nextBatch(b int) int32 {
	if len(c.left) == 0 {
		return 0
	}
	i := c.cursor % len(c.left)
	n := min(int32(b), c.left[i])
	c.left[i] -= n
	if c.left[i] == 0 {
		last := len(c.left) - 1
		c.left[i] = c.left[last]
		c.left = c.left[:last]
		c.cursor = i
	} else {
		c.cursor = i + 1
	}
	return n
}

// sim is one run's state.
type sim struct {
	engine
	in    Input
	rng   *rand.Rand
	noise *noise
	S     int
	st    []station
	pool  *pool // nil with dedicated cores
	fast  bool  // scatter "all" phases take the aggregated path (aggregate.go)
	tree  tree

	firstRelay, firstShard, api int // station indexes; api is −1 without a pool or ApiUs

	colls    []collector
	atts     []attempt
	freeAtts []int32
	load     []int32 // per shard: sampled pods sent and not yet answered (power of two choices)

	bindFree, bindBusy float64
	bound, lat         []float64 // per pod: bind completion, and latency (µs)

	attempts, widened, evals, evalPods, redos int64

	picks    []int32     // scratch: winners of a decision
	targets  []int32     // scratch: shards a sampled frame goes to
	arr      []float64   // scratch: arrival time per node (aggregated path)
	answers  []answer    // scratch: answer time per shard (aggregated path)
	leafBufs [][]float64 // free S-long buffers for attempt.leaf
}

func newSim(in Input) *sim {
	src := rand.NewPCG(in.Seed, in.Seed^0x9e3779b97f4a7c15)
	rng := rand.New(src)
	m := &sim{in: in, rng: rng, noise: newNoise(src, rng, in.CV, in.StallProb, in.StallUs), S: in.Shards, api: -1}
	m.bound = make([]float64, 0, in.Pods)
	m.lat = make([]float64, 0, in.Pods)
	if in.Cores > 0 {
		m.pool = &pool{idle: in.Cores}
	}
	m.fast = m.pool == nil && !in.Exact
	if in.usesTree() {
		m.tree = newTree(in.Shards, in.Fanout)
	}

	add := func(stage, conc int) {
		m.st = append(m.st, station{stage: stage, conc: int32(conc)})
	}
	for range in.Collectors {
		add(stCollectors, 1)
	}
	m.firstRelay = len(m.st)
	for range m.tree.relays {
		add(stRelays, 1)
	}
	m.firstShard = len(m.st)
	for range in.Shards {
		add(stShards, in.Workers)
	}
	if m.pool != nil && in.ApiUs > 0 {
		m.api = len(m.st)
		add(stAPI, cmp.Or(in.ApiConcurrency, in.Cores))
	}
	if m.pool == nil {
		total := 0
		for i := range m.st {
			total += int(m.st[i].conc)
		}
		free := make([]float64, total)
		for i := range m.st {
			m.st[i].free, free = free[:m.st[i].conc:m.st[i].conc], free[m.st[i].conc:]
		}
	}
	m.load = make([]int32, in.Shards)
	if m.fast && m.tree.relays > 0 {
		gaps := make([]float64, 2*in.Shards*in.Workers)
		for i := range in.Shards {
			m.st[m.firstShard+i].gaps = gaps[2*i*in.Workers : 2*(i+1)*in.Workers]
		}
		m.arr = make([]float64, in.Shards+m.tree.relays)
		m.answers = make([]answer, in.Shards)
	}
	m.splitPods()
	return m
}

// splitPods spreads the P pods over collectors and classes by a hash of the pod's index (as
// the intake jump-hashes namespace/name), so collectors get P/C ± √(P/C), not exactly P/C.
func (m *sim) splitPods() {
	C, cls := m.in.Collectors, m.in.Classes
	counts := make([]int32, C*cls)
	if C == 1 && cls == 1 {
		counts[0] = int32(m.in.Pods)
	} else {
		for i := range m.in.Pods {
			h := splitmix64(m.in.Seed ^ uint64(i)*0x9e3779b97f4a7c15)
			counts[int(h%uint64(C))*cls+int((h>>32)%uint64(cls))]++
		}
	}
	m.colls = make([]collector, C)
	for c := range m.colls {
		for _, n := range counts[c*cls : (c+1)*cls] {
			if n > 0 {
				m.colls[c].left = append(m.colls[c].left, n)
			}
		}
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// run processes events until none are left: every pod bound.
func (m *sim) run() {
	for c := range m.colls {
		m.startAttempts(int32(c))
	}
	for {
		j, ok := m.next()
		if !ok {
			return
		}
		if j.what == evDone {
			m.done(j)
		} else {
			m.arrive(j)
		}
	}
}

// submit hands j (dur already sampled) to its station.
func (m *sim) submit(j job) {
	s := &m.st[j.st]
	if m.pool == nil {
		var start float64
		start, j.dur = m.bookAt(s, m.now, j.dur, j.kind == kEval, false)
		m.at(start+j.dur, evDone, j)
		return
	}
	if s.running < s.conc {
		s.running++
		m.pool.ready.push(j)
		m.dispatch()
	} else {
		s.queue.push(j)
	}
}

// bookAt books a job arriving at t on a dedicated station; it returns start and final duration.
//
// On shards of the aggregated path, evaluations of an all-frame are booked at every shard when
// the first shard receives it (ahead), and may leave a worker idle until the frame reaches
// that shard; the gap is kept, and a job booked on arrival (a commit, a sampled frame) that
// fits into it and starts there earlier than after the bookings is served there, before the
// frame, as FIFO wants. A job that does not fit goes after the frame: it cannot push back a
// frame whose finish was already announced (the remaining inversion, see aggregate.go).
func (m *sim) bookAt(s *station, t, dur float64, eval, ahead bool) (float64, float64) {
	start, w, others := s.book(t)
	if s.gaps != nil && !ahead {
		if gs, gw, ok := s.fit(t, dur); ok && gs < start {
			if eval {
				dur += m.collide(s.busyAt(gs, gw))
			}
			s.gaps[2*gw] = min(gs+dur, s.gaps[2*gw+1])
			s.busy += dur
			return gs, dur
		}
	}
	if eval {
		dur += m.collide(others)
	}
	if s.gaps != nil && start > s.free[w] {
		s.gaps[2*w], s.gaps[2*w+1] = s.free[w], start
	}
	s.free[w] = start + dur
	s.busy += dur
	return start, dur
}

// dispatch starts ready jobs on idle cores of the pool, oldest first.
func (m *sim) dispatch() {
	for m.pool.idle > 0 && m.pool.ready.n > 0 {
		j := m.pool.ready.pop()
		s := &m.st[j.st]
		m.pool.idle--
		if j.kind == kEval {
			j.dur += m.collide(s.active > 0)
		}
		s.active++
		s.busy += j.dur
		m.at(m.now+j.dur, evDone, j)
	}
}

// release frees j's core and station slot (pool only); the station's next job joins the back
// of the ready FIFO, behind jobs of other stations that were ready before it.
func (m *sim) release(j job) {
	s := &m.st[j.st]
	s.active--
	s.running--
	m.pool.idle++
	if s.queue.n > 0 {
		s.running++
		m.pool.ready.push(s.queue.pop())
	}
	m.dispatch()
}

// collide decides whether an evaluation that starts while another job of its shard runs must
// be redone, and returns the extra CPU if so. It models two workers reserving the same last
// room: the loser re-evaluates at once on the same worker.
func (m *sim) collide(others bool) float64 {
	if !others || m.in.ConflictProb <= 0 || m.rng.Float64() >= m.in.ConflictProb {
		return 0
	}
	m.redos++
	return m.noise.service(m.in.EvalUs)
}

// done continues the pipeline after a job finished.
func (m *sim) done(j job) {
	if m.pool != nil {
		m.release(j)
	}
	L := m.in.HopLatencyUs
	switch j.kind {
	case kEncode:
		m.atts[j.att].t0 = m.now
		m.send(j.att)
	case kResend:
		m.send(j.att)
	case kHop:
		m.forward(j, m.now+L)
	case kEval:
		m.at(m.now+L, evArrive, job{kind: mProposal, att: j.att, phase: j.phase, flags: j.flags, n: 1, aux: j.aux})
	case kPropose:
		m.handled(j)
	case kDecide:
		m.decide(j.att)
	case kCommit:
		m.bind(j)
	case kRelease: // nothing follows: the shard's core was busy, which is the point
	case kAPI:
		m.finish(int(j.n), m.now+m.in.BindLatencyUs, j.t0)
	}
}

// arrive handles a message reaching its destination.
func (m *sim) arrive(j job) {
	switch j.kind {
	case mFrameRelay:
		m.relay(j)
	case mFrameShard:
		m.submit(job{kind: kEval, st: int32(m.firstShard) + j.aux, att: j.att, phase: j.phase, flags: j.flags,
			n: j.n, aux: j.aux, dur: m.noise.service(m.in.evalUs(int(j.n)))})
	case mProposal:
		a := &m.atts[j.att]
		if j.flags&fSampled != 0 {
			m.load[j.aux] -= a.pods
		}
		m.submit(job{kind: kPropose, st: a.coll, att: j.att, phase: j.phase, n: j.n, aux: j.aux,
			dur: m.noise.services(m.in.ProposalUs, int(j.n))})
	case mCommit:
		m.submit(job{kind: kCommit, st: int32(m.firstShard) + j.aux, att: -1, n: j.n, aux: j.aux, t0: j.t0,
			dur: m.noise.service(float64(j.n) * m.in.CommitUs)})
	case mRelease:
		m.submit(job{kind: kRelease, st: int32(m.firstShard) + j.aux, att: -1, n: j.n, aux: j.aux,
			dur: m.noise.service(float64(j.n) * m.in.ReleaseUs)})
	case mLeaves:
		m.leaves(j.att)
	case mAPI:
		m.submit(job{kind: kAPI, st: int32(m.api), att: -1, n: j.n, t0: j.t0,
			dur: m.noise.service(float64(j.n) * m.in.ApiUs)})
	}
}

// startAttempts fills collector c's window from its intake. The frame is encoded (and sent:
// the same job pays HopUs per first hop, D for a sampled frame, 1 to the root for an all-frame)
// on the collector's core, FIFO with its proposals and decisions.
func (m *sim) startAttempts(c int32) {
	col := &m.colls[c]
	for m.in.Window < 0 || col.inflight < m.in.Window {
		b := col.nextBatch(m.in.Batch)
		if b == 0 {
			return
		}
		id := m.newAttempt()
		a := &m.atts[id]
		*a = attempt{coll: c, pods: b, answers: a.answers[:0]}
		a.all = !m.in.sampled() || (m.in.AllFraction > 0 && m.rng.Float64() < m.in.AllFraction)
		hops := 1
		if !a.all {
			hops = m.in.D
		}
		col.inflight++
		m.attempts++
		m.submit(job{kind: kEncode, st: c, att: id,
			dur: m.noise.service(float64(b)*m.in.EncodeUs + float64(hops)*m.in.HopUs)})
	}
}

func (m *sim) newAttempt() int32 {
	if n := len(m.freeAtts); n > 0 {
		id := m.freeAtts[n-1]
		m.freeAtts = m.freeAtts[:n-1]
		return id
	}
	m.atts = append(m.atts, attempt{})
	return int32(len(m.atts) - 1)
}

// send starts a phase of attempt id: its frame leaves the collector now.
func (m *sim) send(id int32) {
	a := &m.atts[id]
	a.counted, a.deciding, a.anyShard, a.answers = 0, false, false, a.answers[:0]
	if a.all {
		a.targets = int32(m.S)
	} else {
		a.targets = int32(m.in.D)
	}
	a.needed = int32(m.in.needed(int(a.targets)))
	a.pending += a.targets
	m.evals += int64(a.targets)
	m.evalPods += int64(a.targets) * int64(a.pods)
	if a.all {
		if m.fast {
			m.scatterAll(id)
			return
		}
		m.at(m.now+m.in.HopLatencyUs, evArrive, job{kind: mFrameRelay, att: id, phase: a.phase, n: a.pods,
			aux: int32(m.tree.root())})
		return
	}
	for _, s := range m.pickShards(m.in.D) {
		m.load[s] += a.pods
		m.at(m.now+m.in.HopLatencyUs, evArrive, job{kind: mFrameShard, att: id, phase: a.phase, flags: fSampled,
			n: a.pods, aux: s})
	}
}

// handled counts proposals the collector has processed; enough of the current phase → decide.
func (m *sim) handled(j job) {
	a := &m.atts[j.att]
	a.pending -= j.n
	if j.phase == a.phase && !a.deciding {
		a.counted += j.n
		if j.aux >= 0 {
			a.answers = append(a.answers, j.aux)
		}
		if a.counted >= a.needed {
			a.deciding = true
			m.submit(job{kind: kDecide, st: a.coll, att: j.att, dur: m.noise.service(m.in.DecisionUs)})
		}
	}
	if a.decided && a.pending == 0 {
		m.freeAtts = append(m.freeAtts, j.att)
	}
}

// decide ends a phase: widen (re-send to all shards, keeping the window slot) or assign the
// attempt's pods to the answering shards, one uniformly random answer per pod (the scores
// are not modelled, so the winner is any answering shard), and send each winner one decision
// message for the pods it won. Losers' deny messages are not modelled: DecisionUs covers them.
func (m *sim) decide(id int32) {
	a := &m.atts[id]
	if !a.all && !a.widened && m.in.WidenFraction > 0 && m.rng.Float64() < m.in.WidenFraction {
		a.widened, a.all = true, true
		a.phase++
		m.widened++
		m.submit(job{kind: kResend, st: a.coll, att: id, dur: m.noise.service(m.in.HopUs)})
		return
	}
	a.decided = true
	p := m.picks[:0]
	for range a.pods {
		if a.anyShard {
			p = append(p, int32(m.rng.IntN(m.S)))
		} else {
			p = append(p, a.answers[m.rng.IntN(len(a.answers))])
		}
	}
	if len(p) > 1 {
		slices.Sort(p)
	}
	for i := 0; i < len(p); {
		k := i + 1
		for k < len(p) && p[k] == p[i] {
			k++
		}
		m.at(m.now+m.in.HopLatencyUs, evArrive, job{kind: mCommit, att: -1, n: int32(k - i), aux: p[i], t0: a.t0})
		i = k
	}
	// Every answering shard held what it proposed (a pod, or a slot per pod of a batch) and
	// releases what it did not win. (The aggregated all-shards path keeps no answer list.)
	if m.in.ReleaseUs > 0 && !a.anyShard {
		for _, s := range a.answers {
			won := 0
			for _, w := range p {
				if w == s {
					won++
				}
			}
			if lost := int(a.pods) - won; lost > 0 {
				m.at(m.now+m.in.HopLatencyUs, evArrive, job{kind: mRelease, att: -1, n: int32(lost), aux: s})
			}
		}
	}
	m.picks = p
	c := a.coll
	if a.pending == 0 {
		m.freeAtts = append(m.freeAtts, id)
	}
	m.colls[c].inflight--
	m.startAttempts(c)
}

// bind sends the n pods a shard committed through the apiserver: a global FIFO rate limit
// (each Binding occupies it 1/BindPerSec s), then BindLatencyUs of pure delay; with a pool and
// ApiUs the fake apiserver's CPU for the group runs after the last of them passed the limit.
func (m *sim) bind(j job) {
	t := m.now
	for range j.n {
		if r := m.in.BindPerSec; r > 0 {
			t = max(t, m.bindFree) + 1e6/r
			m.bindFree = t
			m.bindBusy += 1e6 / r
		}
		if m.api < 0 {
			m.finish(1, t+m.in.BindLatencyUs, j.t0)
		}
	}
	if m.api >= 0 {
		m.at(t, evArrive, job{kind: mAPI, att: -1, n: j.n, t0: j.t0})
	}
}

// finish records n pods bound at t whose attempt was first sent at t0.
func (m *sim) finish(n int, t, t0 float64) {
	for range n {
		m.bound = append(m.bound, t)
		m.lat = append(m.lat, t-t0)
	}
}
