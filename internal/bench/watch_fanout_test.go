package bench

import "testing"

// The medians come out one per placement, in FanoutPlacements' order whatever order the
// rounds ran them in, each the middle of its own runs, with the violations of all its runs.
func TestFanoutMediansPerPlacement(t *testing.T) {
	var runs []*FanoutRun
	add := func(p string, us float64, viol int) {
		runs = append(runs, &FanoutRun{Placement: p, LeaderCPUPerWriteUs: us, Violations: viol})
	}
	add(FanoutSpread, 1500, 0)
	add(FanoutAlone, 1200, 0)
	add(FanoutLeader, 3400, 0)
	add(FanoutAlone, 1100, 1)
	add(FanoutLeader, 3300, 0)
	add(FanoutSpread, 1600, 0)
	add(FanoutLeader, 3500, 2)
	add(FanoutSpread, 1400, 0)
	add(FanoutAlone, 1300, 0)
	meds := FanoutMedians(runs)
	want := []FanoutMedian{
		{Placement: FanoutLeader, Runs: 3, LeaderCPUPerWriteUs: 3400, Violations: 2},
		{Placement: FanoutSpread, Runs: 3, LeaderCPUPerWriteUs: 1500, Violations: 0},
		{Placement: FanoutAlone, Runs: 3, LeaderCPUPerWriteUs: 1200, Violations: 1},
	}
	if len(meds) != len(want) {
		t.Fatalf("medians %+v, want %+v", meds, want)
	}
	for i := range want {
		if meds[i] != want[i] {
			t.Errorf("median %d: %+v, want %+v", i, meds[i], want[i])
		}
	}
	// A placement that did not run has no median.
	if m := FanoutMedians(runs[:1]); len(m) != 1 || m[0].Placement != FanoutSpread {
		t.Errorf("one run: %+v", m)
	}
}
