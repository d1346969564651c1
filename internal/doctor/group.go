package doctor

import (
	"fmt"
	"math"
	"strings"
)

// A store of the plan run as a replicated group (`--store-replicas N`, docs/design.md §10): every
// member holds the whole state in memory and applies every write; the leader executes each write
// (a follower forwards it there) and a write is answered once a quorum holds it. The figures
// below are the committed measurements, kept equal to their files by TestGroupFiguresAreTheCommittedRuns.
const (
	// A member's anonymous memory for the state of `meganode bench state` (N Nodes, N Pods, N
	// node Leases, created as kube-apiserver creates them): fixed + per object × objects, fitted
	// on 100K–400K nodes (docs/bench/catch-up/model.json: leader_anon_fixed_bytes,
	// leader_anon_bytes_per_object). The leader's, which also holds the raft log's last entries;
	// the learner that caught up held ×0.91 of it at 1M nodes (docs/bench/catch-up/runs.json).
	GroupMemberFixedBytes     = 181207040
	GroupMemberBytesPerObject = 422.535168
	// Time from a member's start without its data (a restart, a new learner) until it serves:
	// fixed + per object × objects, fitted on the same runs (model.json: fixed_seconds,
	// per_object_us); it predicted 7.17 s for 1M nodes, measured 8.63 s (error_percent -17).
	CatchUpFixedSeconds    = -0.055169221999999296
	CatchUpMicrosPerObject = 2.407775882666666
	CatchUpErrorPercent    = -16.968080004636327
	// CPU per write of a 3-member group: etcd's benchmark put (256-byte values, 20,000 puts:
	// docs/bench/replicated-put/leader-only.sh's --total) with all three members as endpoints,
	// as kube-apiserver's --etcd-servers lists them. CPU ticks (1/100 s, user+system) of the
	// leader (m0) and of a follower (m1) before and after the run, from
	// docs/bench/replicated-put/leader-only.txt ("all three endpoints"): the leader executes and
	// proposes each write, a follower forwards two writes in three and applies every one.
	GroupPutCount               = 20000
	GroupPutLeaderTicksBefore   = 59
	GroupPutLeaderTicksAfter    = 122
	GroupPutFollowerTicksBefore = 27
	GroupPutFollowerTicksAfter  = 63
	// GroupSource names the files above.
	GroupSource = "docs/bench/catch-up/model.json (memory and catch-up of a member, bench state's Nodes, Pods and Leases, 100K–400K nodes, 2 cores); " +
		"docs/bench/replicated-put/leader-only.txt (CPU per put of the leader and of a follower, 3 members on 2 cores, etcd's benchmark put with every member as an endpoint)"
)

// GroupLeaderMicrosPerWrite and GroupFollowerMicrosPerWrite are the CPU per write of the
// figures above: 10 ms per tick.
var (
	GroupLeaderMicrosPerWrite   = float64(GroupPutLeaderTicksAfter-GroupPutLeaderTicksBefore) * 1e4 / GroupPutCount
	GroupFollowerMicrosPerWrite = float64(GroupPutFollowerTicksAfter-GroupPutFollowerTicksBefore) * 1e4 / GroupPutCount
)

// StoreGroupPlan sizes the stores' groups: every store of the plan (the default one and each
// split resource's) is a group of Replicas members, one per machine.
type StoreGroupPlan struct {
	Replicas  int              `json:"replicas"`
	Quorum    int              `json:"quorum"`
	Tolerates int              `json:"tolerates"` // members of a group that may be down at once
	Stores    []StoreGroupSize `json:"stores"`
	Machines  int              `json:"machines"` // one member per machine
	Cores     int              `json:"cores"`    // whole cores over every member
	MemoryGiB float64          `json:"memory_gib"`
	Basis     string           `json:"basis"`
	Source    string           `json:"source"`
}

// StoreGroupSize is one store's group: what each member holds and spends.
type StoreGroupSize struct {
	Name               string  `json:"name"`
	Objects            int     `json:"objects"`
	ObjectsBasis       string  `json:"objects_basis"`
	MemoryGiBPerMember float64 `json:"memory_gib_per_member"`
	LeaderCores        float64 `json:"leader_cores"`
	FollowerCores      float64 `json:"follower_cores"`
	CoresPerMember     int     `json:"cores_per_member"` // any member may lead: the leader's, whole, ≥ 1
	CatchUpSeconds     float64 `json:"catch_up_seconds"`
}

const gib = 1 << 30

// planStoreGroup sizes a group of replicas members for each store of sp. Objects are counted
// from the plan's inputs as bench state's were made: a Node and a Lease per node, the pods;
// events are not counted (no measured figure for them).
func planStoreGroup(in PlanInput, sp StorePlan) *StoreGroupPlan {
	g := &StoreGroupPlan{Replicas: in.StoreReplicas, Quorum: in.StoreReplicas/2 + 1, Source: GroupSource}
	g.Tolerates = in.StoreReplicas - g.Quorum
	g.Basis = fmt.Sprintf("every member holds its store's whole state: %.0f MiB + %.0f B × objects (the average of bench state's Node, Pod and Lease); the leader spends %.1f µs CPU per write, each follower %.1f µs (forwarding and applying); any member may lead, so each gets the leader's cores (whole, at least 1); writes only: reads and watches are served by every member on top",
		GroupMemberFixedBytes/float64(1<<20), GroupMemberBytesPerObject, GroupLeaderMicrosPerWrite, GroupFollowerMicrosPerWrite)
	for _, sh := range sp.Shards {
		var objects int
		var what []string
		for _, r := range sh.Resources {
			switch r {
			case "rest":
				objects += in.Nodes
				what = append(what, fmt.Sprintf("%d Nodes", in.Nodes))
			case "leases":
				objects += in.Nodes
				what = append(what, fmt.Sprintf("%d Leases", in.Nodes))
			case "pods":
				objects += in.Pods
				what = append(what, fmt.Sprintf("%d Pods", in.Pods))
			case "events":
				what = append(what, "events not counted")
			}
		}
		s := StoreGroupSize{Name: sh.Name, Objects: objects, ObjectsBasis: strings.Join(what, ", "),
			MemoryGiBPerMember: (GroupMemberFixedBytes + GroupMemberBytesPerObject*float64(objects)) / gib,
			LeaderCores:        sh.WritesPerSec * GroupLeaderMicrosPerWrite / 1e6,
			FollowerCores:      sh.WritesPerSec * GroupFollowerMicrosPerWrite / 1e6,
			CatchUpSeconds:     math.Max(0, CatchUpFixedSeconds+CatchUpMicrosPerObject*float64(objects)/1e6)}
		s.CoresPerMember = max(1, int(math.Ceil(s.LeaderCores)))
		g.Stores = append(g.Stores, s)
		g.Machines += in.StoreReplicas
		g.Cores += in.StoreReplicas * s.CoresPerMember
		g.MemoryGiB += float64(in.StoreReplicas) * s.MemoryGiBPerMember
	}
	return g
}

// groupNotes are the plan's notes and figures for a group.
func groupNotes(in PlanInput, g *StoreGroupPlan) (notes []string, figures []Figure) {
	if in.StoreReplicas%2 == 0 {
		notes = append(notes, fmt.Sprintf("warning: --store-replicas %d is even: a group of %d tolerates %d member(s) down, as one of %d does, and needs one more machine per store; use %d or %d",
			in.StoreReplicas, in.StoreReplicas, g.Tolerates, in.StoreReplicas-1, in.StoreReplicas-1, in.StoreReplicas+1))
	}
	if in.StoreSource == DefaultStoreSource {
		notes = append(notes, "store groups: the store capacity above is one member's (lease-flood on a single store); a group's leader spends more CPU per write (the figures above): pass --bench-json with a `meganode bench group-put` result (e.g. docs/bench/replicated-put/runs.json) to size the shards for groups")
	}
	notes = append(notes,
		"store groups: --etcd-servers (and each --etcd-servers-overrides entry) should list every member's client URL (';'-separated in an override), so kube-apiserver's client spreads over the members and fails over at once; the endpoints above are one per store",
		fmt.Sprintf("store groups keep every write in memory only (durability replicated): %d member(s) of a group may be down without losing an acknowledged write; all members down at once lose the store's data (docs/design.md §10)", g.Tolerates))
	var slowest StoreGroupSize
	for _, s := range g.Stores {
		if s.CatchUpSeconds >= slowest.CatchUpSeconds {
			slowest = s
		}
	}
	figures = []Figure{
		{"store group memory per member", fmt.Sprintf("%.0f MiB + %.1f B per object", GroupMemberFixedBytes/float64(1<<20), GroupMemberBytesPerObject), "measured: docs/bench/catch-up/model.json (a member's anonymous memory, fitted on 100K–400K nodes of Nodes, Pods and Leases)"},
		{"store group cores (leader, followers)", fmt.Sprintf("%.1f µs per write on the leader, %.1f µs on a follower", GroupLeaderMicrosPerWrite, GroupFollowerMicrosPerWrite), "measured: docs/bench/replicated-put/leader-only.txt (3 members on 2 cores, etcd's benchmark put, every member an endpoint)"},
		{"store group catch-up", fmt.Sprintf("%.2f µs per object (store %s: %.1f s)", CatchUpMicrosPerObject, slowest.Name, slowest.CatchUpSeconds), fmt.Sprintf("measured: docs/bench/catch-up/model.json (its 1M-node check was %.0f %% off)", CatchUpErrorPercent)},
	}
	return notes, figures
}
