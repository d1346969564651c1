package sim

import (
	"context"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/scheduler/shard"
)

// What `scheduler million` reports, at a small size: every pod bound once (Simulate checks the
// ledger's count), no node over-committed, the mixed workload's spread groups within maxSkew,
// CPU split by role, the peak RSS, the timeline and a ranked sample of placements.
func TestMillionReport(t *testing.T) {
	for _, w := range []string{WorkloadUniform, WorkloadMixed} {
		r, err := Simulate(context.Background(), Config{Nodes: 300, Pods: 400, Shards: 4, Fanout: 2, Parallelism: 1,
			EquivalenceTTL: time.Second, FeasibleToFind: shard.FeasibleAuto, Scatter: 2, Batch: 8, ParallelPods: 1,
			Precreate: true, GlobalView: map[string]string{WorkloadUniform: "off", WorkloadMixed: "auto"}[w], CountedBinds: true,
			Timeout: time.Minute, Workload: w, Sample: 10 * time.Millisecond, RoleCPU: true, RankSample: 20})
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if r.Bound != 400 || r.Overcommitted != 0 {
			t.Errorf("%s: bound %d, over-committed nodes %d", w, r.Bound, r.Overcommitted)
		}
		if w == WorkloadMixed && r.SpreadMaxSkew > 1 {
			t.Errorf("mixed: a spread group has zone skew %d > maxSkew 1", r.SpreadMaxSkew)
		}
		if r.PeakRSSBytes == 0 || len(r.Timeline) == 0 || r.Timeline[len(r.Timeline)-1].Bound != 400 {
			t.Errorf("%s: peak RSS %d, timeline %v", w, r.PeakRSSBytes, r.Timeline)
		}
		if r.Rank == nil || r.Rank.Sample != 20 || r.Rank.TopShare < 0 || r.Rank.TopShare > 1 {
			t.Errorf("%s: rank %+v", w, r.Rank)
		}
		var sum float64
		if r.RoleCPUSampled == 0 { // a run shorter than the profile's 10 ms period
			t.Logf("%s: no CPU sample in %.3f s", w, r.Seconds)
			continue
		}
		for _, role := range Roles {
			v, ok := r.RoleCPU[role]
			if !ok {
				t.Errorf("%s: role %s missing from %v", w, role, r.RoleCPU)
			}
			sum += v
		}
		if sum < 0.99*r.CPUSeconds || sum > 1.01*r.CPUSeconds {
			t.Errorf("%s: role CPU %v (sum %.3f) against %.3f s", w, r.RoleCPU, sum, r.CPUSeconds)
		}
	}
}

func TestRoleOfStack(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"runtime.memmove", "github.com/meganode/meganode/internal/scheduler/collector.(*Collector).Propose",
			"github.com/meganode/meganode/internal/scheduler/shard.(*Shard).handle"}, RoleCollector},
		{[]string{"k8s.io/client-go/testing.(*tracker).Get", "github.com/meganode/meganode/internal/scheduler/shard.(*Shard).commit"}, RoleAPI},
		{[]string{"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources.(*Fit).Filter",
			"k8s.io/client-go/util/workqueue.ParallelizeUntil.func1"}, RoleShard},
		{[]string{"k8s.io/apimachinery/pkg/runtime.DeepCopy", "k8s.io/client-go/tools/cache.(*Reflector).watch"}, RoleInformers},
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, RoleGC},
		{[]string{"runtime.futex", "runtime.mcall"}, RoleOther},
	} {
		if got := roleOfStack(c.stack); got != c.want {
			t.Errorf("%v: %s, want %s", c.stack, got, c.want)
		}
	}
}
