package doctor

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSimulateProjections(t *testing.T) {
	ps, err := SimulateProjections(readTestdata(t, "testdata/simulate.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := SimProjection{Shards: 16, D: 2, K: 1, Batch: 1, Collectors: 16, Costs: "shared (16 shards on 8 cores)", Nodes: 100_000, Pods: 100_000, Seconds: 20, Cores: 32}
	if len(ps) != 4 || ps[0] != want {
		t.Fatalf("projections %+v", ps)
	}
	for _, bad := range []string{`nope`, `{"projection":[]}`, `{"command":["--target-nodes","x"],"projection":[]}`} {
		if _, err := SimulateProjections([]byte(bad)); err == nil {
			t.Errorf("SimulateProjections(%s): no error", bad)
		}
	}
}

func TestSizeScheduler(t *testing.T) {
	ps, err := SimulateProjections(readTestdata(t, "testdata/simulate.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		nodes, pods   int
		target        float64
		shards, cores int
		seconds       float64
		fromShards    int
	}{
		// As measured: 16 shards of 6,250 nodes, 20 s × 1.25; the alone shape (cheaper) is not
		// used when shared costs exist, nor the batch-32 shape.
		{100_000, 100_000, 60, 16, 32, 25, 16},
		// Twice the nodes, three times the pods: 32 shards of 6,250 nodes, 20 × 1.25 × 3 × 16/32.
		{200_000, 300_000, 60, 32, 64, 37.5, 16},
		// 10 s: the 16-shard shape needs 120 shards (240 cores), the 64-shard one 128 (160 cores).
		{200_000, 300_000, 10, 128, 160, 9.375, 64},
		// A small cluster: one shard.
		{1000, 2000, 60, 1, 2, 20 * 1.25 * 0.02 * 16, 16},
	} {
		z, err := SizeScheduler(ps, c.nodes, c.pods, c.target)
		if err != nil {
			t.Fatal(err)
		}
		if z.Shards != c.shards || z.Cores != c.cores || math.Abs(z.Seconds-c.seconds) > 1e-9 || z.From.Shards != c.fromShards {
			t.Errorf("%d nodes, %d pods in %g s: %d shards, %d cores, %.4g s from S=%d; want %d, %d, %.4g from S=%d",
				c.nodes, c.pods, c.target, z.Shards, z.Cores, z.Seconds, z.From.Shards, c.shards, c.cores, c.seconds, c.fromShards)
		}
	}
	z, _ := SizeScheduler(ps, 100_000, 100_000, 60)
	if !strings.Contains(z.Basis, "S=16 d=2 K=1 batch 1 (costs measured shared)") || !strings.Contains(z.Basis, "batched by 32: 2.5 s on 16 shards") {
		t.Errorf("basis %q", z.Basis)
	}
	// No pods: shards hold the measured nodes per shard, and the basis says so.
	if z, _ := SizeScheduler(ps, 100_000, 0, 60); z.Shards != 16 || z.Seconds != 0 || !strings.Contains(z.Basis, "no pods given") {
		t.Errorf("no pods: %+v", z)
	}
	if _, err := SizeScheduler([]SimProjection{{Shards: 4, Batch: 32, Nodes: 1, Pods: 1, Seconds: 1, Cores: 4}}, 10, 10, 60); err == nil {
		t.Error("no batch-1 shape: no error")
	}
}

// The plan from a given bench JSON and simulate JSON: both figures are used and named.
func TestPlanFromBenchAndSimulateJSON(t *testing.T) {
	ops, desc, err := StoreThroughput(readTestdata(t, "testdata/bench-lease-flood.json"))
	if err != nil {
		t.Fatal(err)
	}
	if ops != 120_000 || !strings.Contains(desc, "lease-flood on meganode at 1000 clients), median of 3 rounds") {
		t.Fatalf("bench: %v %q", ops, desc)
	}
	ps, err := SimulateProjections(readTestdata(t, "testdata/simulate.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := Plan(PlanInput{Nodes: 200_000, Pods: 300_000, StoreWritesPerSec: ops, StoreSource: desc + " (testdata/bench-lease-flood.json)",
		SimProjections: ps, SimSource: "measured: testdata/simulate.json"})
	if p.Store.CapacityWritesPerSec != 120_000 || p.Store.LeasesFit != "yes" || len(p.Store.Shards) != 2 {
		t.Errorf("store %+v", p.Store)
	}
	// 300K pods on 200K nodes in 60 s: the 16-shard shape at 32 shards of 6,250 nodes, 37.5 s on 64 cores.
	if sc := p.Scheduler; sc.Shards != 32 || sc.Cores != 64 || sc.Seconds != 37.5 || sc.Source != "measured: testdata/simulate.json" {
		t.Errorf("scheduler %+v", sc)
	}
	var sb strings.Builder
	p.WriteTable(&sb)
	for _, w := range []string{"FIGURES USED", "120000 writes/s per store", "measured: 120000 ops/s (lease-flood on meganode at 1000 clients), median of 3 rounds",
		"(testdata/bench-lease-flood.json)", "measured: testdata/simulate.json", "not measured here"} {
		if !strings.Contains(sb.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, sb.String())
		}
	}
	if len(p.Figures) != 3 || p.Figures[0].Value != "120000 writes/s per store" || p.Figures[1].Source != "measured: testdata/simulate.json" {
		t.Errorf("figures %+v", p.Figures)
	}
}

// The defaults are the committed runs' figures.
func TestDefaultStoreIsTheCommittedRun(t *testing.T) {
	ops, desc, err := StoreThroughput(readTestdata(t, "../../docs/bench/results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if math.Round(ops) != DefaultStoreWritesPerSec || !strings.Contains(desc, "lease-flood on meganode at 1000 clients), median of 3 rounds") {
		t.Errorf("docs/bench/results.json gives %.1f (%s); DefaultStoreWritesPerSec is %d", ops, desc, DefaultStoreWritesPerSec)
	}
	p := Plan(PlanInput{Nodes: 10, Pods: 10})
	if p.Store.CapacityWritesPerSec != DefaultStoreWritesPerSec || p.Store.CapacitySource != DefaultStoreSource {
		t.Errorf("store default %+v", p.Store)
	}
}

func TestDefaultSimProjectionsAreTheCommittedRun(t *testing.T) {
	ps, err := SimulateProjections(readTestdata(t, "../../docs/bench/scheduler-sim/run-100k.json"))
	if err != nil {
		t.Fatal(err)
	}
	var shared []SimProjection
	for _, p := range ps {
		if strings.HasPrefix(p.Costs, "shared") {
			p.Seconds = math.Round(p.Seconds*1000) / 1000
			shared = append(shared, p)
		}
	}
	if !reflect.DeepEqual(shared, DefaultSimProjections) {
		t.Errorf("docs/bench/scheduler-sim/run-100k.json's shared projections:\n%+v\nDefaultSimProjections:\n%+v", shared, DefaultSimProjections)
	}
}
