package doctor

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The group figures are the committed runs' numbers, as their files hold them.
func TestGroupFiguresAreTheCommittedRuns(t *testing.T) {
	var m struct {
		Fixed        float64 `json:"leader_anon_fixed_bytes"`
		PerObject    float64 `json:"leader_anon_bytes_per_object"`
		FixedSeconds float64 `json:"fixed_seconds"`
		PerObjectUS  float64 `json:"per_object_us"`
		ErrorPercent float64 `json:"error_percent"`
	}
	if err := json.Unmarshal(readTestdata(t, "../../docs/bench/catch-up/model.json"), &m); err != nil {
		t.Fatal(err)
	}
	if m.Fixed != GroupMemberFixedBytes || m.PerObject != GroupMemberBytesPerObject || m.FixedSeconds != CatchUpFixedSeconds ||
		m.PerObjectUS != CatchUpMicrosPerObject || m.ErrorPercent != CatchUpErrorPercent {
		t.Errorf("docs/bench/catch-up/model.json %+v, the constants differ", m)
	}
	// leader-only.sh: m$i listens on 2379$i; the run's puts.
	sh := string(readTestdata(t, "../../docs/bench/replicated-put/leader-only.sh"))
	if !strings.Contains(sh, "--listen-client-urls http://127.0.0.1:2379$i") || !strings.Contains(sh, "--total="+strconv.Itoa(GroupPutCount)+" ") {
		t.Errorf("leader-only.sh: members or --total=%d not as the constants assume", GroupPutCount)
	}
	// leader-only.txt: the leader is m0 (127.0.0.1:23790); the ticks of the all-endpoints run.
	txt := string(readTestdata(t, "../../docs/bench/replicated-put/leader-only.txt"))
	if !strings.HasPrefix(txt, "leader 127.0.0.1:23790 only:") {
		t.Errorf("leader-only.txt: the leader is not m0:\n%s", txt)
	}
	_, all, ok := strings.Cut(txt, "all three endpoints:")
	ticks := regexp.MustCompile(`CPU ticks m0 m1 m2 before: (\d+) (\d+) (\d+)\s+after: (\d+) (\d+) (\d+)`).FindStringSubmatch(all)
	if !ok || ticks == nil {
		t.Fatalf("leader-only.txt: no CPU ticks of the all-endpoints run:\n%s", txt)
	}
	n := func(i int) int { v, _ := strconv.Atoi(ticks[i]); return v }
	if n(1) != GroupPutLeaderTicksBefore || n(4) != GroupPutLeaderTicksAfter || n(2) != GroupPutFollowerTicksBefore || n(5) != GroupPutFollowerTicksAfter {
		t.Errorf("leader-only.txt ticks %v, the constants differ", ticks[1:])
	}
	// The other follower spent the same as the one the constants take.
	if n(6)-n(3) != n(5)-n(2) {
		t.Logf("followers differ: m1 %d ticks, m2 %d", n(5)-n(2), n(6)-n(3))
	}
	if GroupLeaderMicrosPerWrite != 31.5 || GroupFollowerMicrosPerWrite != 18 {
		t.Errorf("µs per write: leader %v, follower %v", GroupLeaderMicrosPerWrite, GroupFollowerMicrosPerWrite)
	}
}

func TestPlanStoreGroup(t *testing.T) {
	in := PlanInput{Nodes: 100_000, Pods: 1_000_000}
	single := Plan(in)
	in.StoreReplicas = 3
	p := Plan(in)
	g := p.StoreGroup
	if g == nil {
		t.Fatal("no store group with --store-replicas 3")
	}
	if g.Replicas != 3 || g.Quorum != 2 || g.Tolerates != 1 || len(g.Stores) != len(p.Store.Shards) || g.Machines != 3*len(p.Store.Shards) {
		t.Errorf("group %+v for %d stores", g, len(p.Store.Shards))
	}
	cores, mem := 0, 0.0
	for i, s := range g.Stores {
		sh := p.Store.Shards[i]
		if s.Name != sh.Name {
			t.Errorf("group store %d is %s, the plan's %s", i, s.Name, sh.Name)
		}
		// Every member holds the whole state of its store: the measured model.
		want := (GroupMemberFixedBytes + GroupMemberBytesPerObject*float64(s.Objects)) / (1 << 30)
		if math.Abs(s.MemoryGiBPerMember-want) > 1e-9 {
			t.Errorf("%s: %.3f GiB per member, want %.3f", s.Name, s.MemoryGiBPerMember, want)
		}
		if math.Abs(s.LeaderCores-sh.WritesPerSec*31.5e-6) > 1e-9 || math.Abs(s.FollowerCores-sh.WritesPerSec*18e-6) > 1e-9 || s.FollowerCores >= s.LeaderCores {
			t.Errorf("%s: %.0f writes/s → leader %.3f cores, followers %.3f", s.Name, sh.WritesPerSec, s.LeaderCores, s.FollowerCores)
		}
		if s.CoresPerMember < 1 || float64(s.CoresPerMember) < s.LeaderCores {
			t.Errorf("%s: %d cores per member for a leader's %.2f", s.Name, s.CoresPerMember, s.LeaderCores)
		}
		cores += 3 * s.CoresPerMember
		mem += 3 * s.MemoryGiBPerMember
	}
	if g.Cores != cores || math.Abs(g.MemoryGiB-mem) > 1e-9 {
		t.Errorf("totals %d cores %.2f GiB, want %d, %.2f", g.Cores, g.MemoryGiB, cores, mem)
	}
	// Objects: a Node and a Lease per node, the pods, wherever they are stored.
	objects := 0
	for _, s := range g.Stores {
		objects += s.Objects
	}
	if objects != 2*in.Nodes+in.Pods {
		t.Errorf("%d objects over the stores, want %d", objects, 2*in.Nodes+in.Pods)
	}
	// The rest of the plan is the single member's; the group adds its notes and figures.
	if !equalJSON(t, single.Store, p.Store) || !equalJSON(t, single.APIServer, p.APIServer) || !equalJSON(t, single.Scheduler, p.Scheduler) {
		t.Error("--store-replicas changed the store, apiserver or scheduler sections")
	}
	if len(p.Figures) != len(single.Figures)+3 || !strings.Contains(strings.Join(p.Notes, "\n"), "should list every member's client URL") {
		t.Errorf("figures %+v notes %v", p.Figures, p.Notes)
	}
	if n := strings.Join(p.Notes, "\n"); strings.Contains(n, "is even") || !strings.Contains(n, "`meganode bench group-put` result") {
		t.Errorf("3 members, the default capacity: %v", p.Notes)
	}
	in.StoreWritesPerSec, in.StoreSource = 19_000, "given"
	if n := strings.Join(Plan(in).Notes, "\n"); strings.Contains(n, "bench group-put") {
		t.Errorf("a given capacity: %v", n)
	}
	var sb strings.Builder
	p.WriteTable(&sb)
	for _, w := range []string{"STORE GROUPS (3 members per store)", "quorum 2", "GiB, ", " machines, ", "docs/bench/catch-up/model.json", "docs/bench/replicated-put/leader-only.txt"} {
		if !strings.Contains(sb.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, sb.String())
		}
	}
	if y := p.YAMLText(); !strings.Contains(y, "store_group:\n  replicas: 3\n  quorum: 2\n") {
		t.Errorf("yaml lacks the store group:\n%s", y)
	}
}

// An even count adds no fault tolerance: a warning, not a problem.
func TestPlanStoreGroupEven(t *testing.T) {
	p := Plan(PlanInput{Nodes: 1000, Pods: 1000, StoreReplicas: 4})
	if p.StoreGroup.Tolerates != 1 || p.StoreGroup.Quorum != 3 {
		t.Errorf("4 members: %+v", p.StoreGroup)
	}
	if n := strings.Join(p.Notes, "\n"); !strings.Contains(n, "warning: --store-replicas 4 is even: a group of 4 tolerates 1 member(s) down, as one of 3 does") {
		t.Errorf("notes %v", p.Notes)
	}
	if len(p.Problems) != 0 {
		t.Errorf("problems %v", p.Problems)
	}
}

// One replica (the default) is the plan of before: no group section, the same output.
func TestPlanOneReplicaUnchanged(t *testing.T) {
	for _, in := range []PlanInput{{Nodes: 1_000_000, Pods: 1_000_000}, {Nodes: 5000, Pods: 150_000}, {Nodes: 100}} {
		a := Plan(in)
		in.StoreReplicas = 1
		b := Plan(in)
		if b.StoreGroup != nil || !equalJSON(t, a, b) || a.YAMLText() != b.YAMLText() || a.FlagsText() != b.FlagsText() {
			t.Errorf("%d nodes: --store-replicas 1 changed the plan", in.Nodes)
		}
		var ta, tb strings.Builder
		a.WriteTable(&ta)
		b.WriteTable(&tb)
		if ta.String() != tb.String() || strings.Contains(tb.String(), "STORE GROUP") {
			t.Errorf("%d nodes: --store-replicas 1 changed the table", in.Nodes)
		}
	}
	if err := (PlanInput{Nodes: 1, StoreReplicas: -1}).Validate(); err == nil {
		t.Error("--store-replicas -1 accepted")
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}
