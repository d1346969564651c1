package bench

import (
	"math"
	"strings"
	"testing"
)

func hbStep(asked, achieved, p99 float64, errors int, apiCores, storeCores, genCores, host float64) HeartbeatStep {
	s := HeartbeatStep{AskedPerSec: asked, AchievedPerSec: achieved, WindowSeconds: 10, Renewals: int(achieved * 10),
		Puts: int(achieved * 10), PutP50Ms: p99 / 4, PutP99Ms: p99, PutMaxMs: p99 * 2, Errors: errors, HostBusyCores: host}
	for _, p := range []struct {
		n string
		c float64
	}{{HeartbeatAPIServer, apiCores}, {HeartbeatStore, storeCores}, {HeartbeatGenerator, genCores}} {
		ps := ProcStep{Name: p.n, CPUSeconds: p.c * 10, Cores: p.c}
		if s.Renewals > 0 {
			v := ps.CPUSeconds * 1000 / float64(s.Renewals)
			ps.CPUMsPerRenewal = &v
		}
		s.Procs = append(s.Procs, ps)
	}
	s.Judge(HeartbeatP99Limit)
	return s
}

func TestHeartbeatJudge(t *testing.T) {
	for _, c := range []struct {
		s    HeartbeatStep
		held bool
		why  string
	}{
		{hbStep(1000, 998, 40, 0, 1, 0.2, 0.3, 1.5), true, "held"},
		{hbStep(1000, 998, 1001, 0, 1, 0.2, 0.3, 1.5), false, "p99"},
		{hbStep(1000, 998, 40, 3, 1, 0.2, 0.3, 1.5), false, "3 renewals failed"},
		{hbStep(1000, 949, 40, 0, 1, 0.2, 0.3, 1.5), false, "achieved 949/s < 95%"},
		{hbStep(1000, 950, 1000, 0, 1, 0.2, 0.3, 1.5), true, "held"}, // both bounds inclusive
	} {
		if c.s.Held != c.held || !strings.Contains(c.s.Verdict, c.why) {
			t.Errorf("asked %.0f achieved %.0f p99 %.0f errors %d: held %v %q, want %v %q",
				c.s.AskedPerSec, c.s.AchievedPerSec, c.s.PutP99Ms, c.s.Errors, c.s.Held, c.s.Verdict, c.held, c.why)
		}
	}
	var empty HeartbeatStep
	empty.AskedPerSec = 10
	if empty.Judge(HeartbeatP99Limit); empty.Held || !strings.Contains(empty.Verdict, "no PUT") {
		t.Errorf("a step without PUTs held: %q", empty.Verdict)
	}
}

func TestHeartbeatCeiling(t *testing.T) {
	steps := []HeartbeatStep{
		hbStep(500, 500, 20, 0, 0.5, 0.1, 0.2, 0.8),
		hbStep(1000, 1000, 60, 0, 1.0, 0.2, 0.4, 1.6),
		hbStep(2000, 1700, 1500, 0, 1.3, 0.2, 0.45, 1.98),
	}
	c := Ceiling(steps, 2)
	if !c.Found || c.AtLeast || c.PerSec != 1000 || c.AskedPerSec != 1000 || c.Nodes != 10000 || c.FirstFailedPerSec != 2000 {
		t.Fatalf("ceiling: %+v", c)
	}
	// 1 core over 1000/s = 1 ms per renewal for kube-apiserver, 0.2 for the store.
	if math.Abs(c.CPUMsPerRenewal[HeartbeatAPIServer]-1) > 1e-9 || math.Abs(c.ServerCPUMs-1.2) > 1e-9 {
		t.Errorf("CPU per renewal: %+v, server %.3f", c.CPUMsPerRenewal, c.ServerCPUMs)
	}
	if math.Abs(c.ZeroCostPerSec-2000/1.2) > 1e-6 || math.Abs(c.ZeroCostNodes-10*2000/1.2) > 1e-6 {
		t.Errorf("zero-cost: %.1f/s %.0f nodes", c.ZeroCostPerSec, c.ZeroCostNodes)
	}
	if math.Abs(c.APIServerOnlyPerSec-2000) > 1e-6 {
		t.Errorf("kube-apiserver alone: %.1f/s", c.APIServerOnlyPerSec)
	}
	if c.Bound != HeartbeatAPIServer || !strings.Contains(c.BoundNote, "saturated") || !strings.Contains(c.BoundNote, "2000/s") {
		t.Errorf("bound: %q (%s)", c.Bound, c.BoundNote)
	}

	// Every step held: at least the last.
	if c := Ceiling(steps[:2], 2); !c.Found || !c.AtLeast || c.PerSec != 1000 || c.FirstFailedPerSec != 0 {
		t.Errorf("all held: %+v", c)
	}
	// The first step failed: no ceiling, and nothing shown as zero-cost.
	if c := Ceiling(steps[2:], 2); c.Found || c.FirstFailedPerSec != 2000 || c.ZeroCostPerSec != 0 {
		t.Errorf("first failed: %+v", c)
	}
	if !strings.Contains(ceilingText(Ceiling(steps[2:], 2)), "ceiling: missing") {
		t.Errorf("a missing ceiling is not printed as missing")
	}
	// The generator as the largest user is named.
	gen := []HeartbeatStep{hbStep(500, 500, 20, 0, 0.3, 0.1, 0.9, 1.4), hbStep(1000, 800, 20, 0, 0.5, 0.2, 1.3, 2)}
	if c := Ceiling(gen, 2); c.Bound != HeartbeatGenerator {
		t.Errorf("generator bound: %q", c.Bound)
	}
}

func TestHeartbeatReport(t *testing.T) {
	mega := HeartbeatStoreRun{Store: TargetMeganode, Steps: []HeartbeatStep{
		hbStep(1000, 1000, 30, 0, 1.0, 0.1, 0.4, 1.5), hbStep(2000, 1990, 80, 0, 1.4, 0.2, 0.35, 1.98), hbStep(3000, 2100, 2000, 0, 1.45, 0.2, 0.35, 2)}}
	etcd := HeartbeatStoreRun{Store: TargetEtcd, Steps: []HeartbeatStep{
		hbStep(1000, 1000, 50, 0, 1.0, 0.3, 0.4, 1.7), hbStep(2000, 1500, 1500, 0, 1.2, 0.4, 0.3, 2)}}
	mega.Ceiling, etcd.Ceiling = Ceiling(mega.Steps, 2), Ceiling(etcd.Steps, 2)
	r := &HeartbeatReport{Cores: 2, Leases: 10000, Rates: []float64{1000, 2000, 3000}, StepSeconds: 10, P99LimitMs: 1000,
		Runs: []HeartbeatStoreRun{mega, etcd}}
	r.Finish()
	if math.Abs(r.Ratio-1.99) > 1e-9 || !strings.HasPrefix(r.Target, "MET") {
		t.Errorf("ratio %.3f, target %q", r.Ratio, r.Target)
	}
	sum := r.Summary()
	for _, want := range []string{"ceiling: 1990 renewals/s", "19900 nodes", "ceiling: 1000 renewals/s", "1.99×", "zero-cost generator", "apiserver PUT p50", "missing"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	charts := r.Charts()
	if len(charts) != 2 || len(charts[0].Chart.Series) != 3 || !math.IsNaN(charts[0].Chart.Series[1].Values[2]) {
		t.Fatalf("charts: %+v", charts)
	}
	if _, err := charts[0].Chart.PNG(); err != nil {
		t.Fatal(err)
	}
	// Only one store: not judged, no ratio.
	one := &HeartbeatReport{Runs: []HeartbeatStoreRun{mega}}
	if one.Finish(); one.Ratio != 0 || !strings.HasPrefix(one.Target, "not judged") {
		t.Errorf("one store: %+v", one)
	}
}
