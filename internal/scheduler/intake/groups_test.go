package intake

import (
	"slices"
	"testing"

	"github.com/meganode/meganode/internal/scheduler/wire"
)

func TestGroupGateOneInFlightPerGroup(t *testing.T) {
	var woken []string
	g := newGroupGate(func(k string) { woken = append(woken, k) })
	a0, b0, c0 := wire.AttemptKey{UID: "a"}, wire.AttemptKey{UID: "b"}, wire.AttemptKey{UID: "c"}
	if !g.acquire("ns", "ns/a", a0) {
		t.Fatal("first pod of a group must go")
	}
	if g.acquire("ns", "ns/b", b0) || g.acquire("ns", "ns/c", c0) {
		t.Fatal("second and third pods of the group must wait")
	}
	if g.acquire("ns", "ns/b", b0) { // sent again while parked: still parked, listed once
		t.Fatal("parked pod went")
	}
	if !g.acquire("", "ns/plain", wire.AttemptKey{UID: "p"}) || !g.acquire("other", "other/x", wire.AttemptKey{UID: "x"}) {
		t.Fatal("unconstrained pods and other groups must not wait")
	}
	g.release(wire.AttemptKey{UID: "a", Attempt: 1}, nil) // a stale attempt frees nothing
	if len(woken) != 0 {
		t.Fatalf("woken %v by a stale release", woken)
	}
	g.release(a0, &wire.Placement{UID: "a", Node: "n1"})
	if !slices.Equal(woken, []string{"ns/b"}) {
		t.Fatalf("woken %v, want [ns/b]", woken)
	}
	if g.acquire("ns", "ns/c", c0) {
		t.Fatal("c took the slot handed to b")
	}
	g.drop("ns/b") // b was deleted meanwhile: the slot goes to c
	if !slices.Equal(woken, []string{"ns/b", "ns/c"}) {
		t.Fatalf("woken %v, want [ns/b ns/c]", woken)
	}
	if !g.acquire("ns", "ns/c", c0) {
		t.Fatal("c was handed the slot")
	}
	pl := g.placements()
	if len(pl) != 1 || pl[0] != (wire.Placement{UID: "a", Namespace: "ns", Name: "a", Node: "n1"}) {
		t.Fatalf("placements %+v", pl)
	}
	g.release(c0, nil) // requeued: no placement, nobody waiting
	if len(g.slots) != 1 || len(g.placements()) != 1 {
		t.Fatalf("slots %v placements %v", g.slots, g.placements())
	}
}
