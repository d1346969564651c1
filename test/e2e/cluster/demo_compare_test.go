package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/cluster"
)

// TestDemoComparison runs `meganode demo` as `make demo` does, at a small size: the meganode
// stack (meganode-store + the meganode scheduler), then the stock stack (etcd v3.6 +
// kube-scheduler) under the same load. It checks that both ran to the end, every pod was
// scheduled in both, every row of the table has both values, and the printed table is
// comparison.json. Speed is not asserted: that is the benchmarks' business.
func TestDemoComparison(t *testing.T) {
	bd := binDir(t)
	const nodes, pods, drain = 50, 100, 100
	dir := t.TempDir()
	stateDir, out := filepath.Join(dir, "state"), filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// --qps 25: a window of 4 s, long enough for each stack to serve every verb (lease PUTs too).
	cmd := exec.CommandContext(ctx, filepath.Join(bd, "meganode"), "demo", "--nodes", "50", "--pods", "100", "--drain-pods", "100",
		"--qps", "25", "--state-dir", stateDir, "--out", out)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) } // let it stop its clusters
	cmd.WaitDelay = 30 * time.Second
	defer func() { // whatever a failed run left behind
		for _, name := range []string{cluster.StackMeganode, cluster.StackStock} {
			_ = cluster.Down(filepath.Join(stateDir, name), nil)
		}
	}()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	t.Logf("meganode demo in %.1fs; stdout:\n%s", time.Since(began).Seconds(), stdout.String())
	if err != nil {
		t.Fatalf("meganode demo: %v; stderr:\n%s", err, lastLinesOf(stderr.String(), 40))
	}

	b, err := os.ReadFile(filepath.Join(out, "comparison.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c cluster.Comparison
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Nodes != nodes || c.Pods != pods || c.DrainPods != drain || len(c.Stacks) != 2 {
		t.Fatalf("comparison of %d nodes, %d pods, drain %d, %d stacks", c.Nodes, c.Pods, c.DrainPods, len(c.Stacks))
	}
	want := []struct{ name, store, sched, storeKind, schedKind string }{
		{cluster.StackMeganode, cluster.StoreMeganode, cluster.SchedulerMeganode, cluster.BinStore, cluster.KindMeganodeScheduler},
		{cluster.StackStock, cluster.StoreEtcd, cluster.SchedulerKube, cluster.StoreEtcd, cluster.BinScheduler},
	}
	for i, w := range want {
		s := c.Stacks[i]
		if s.Name != w.name || s.Store != w.store || s.Scheduler != w.sched || s.Error != "" {
			t.Errorf("stack %d: %s on %s with %s, error %q; want %s on %s with %s", i, s.Name, s.Store, s.Scheduler, s.Error, w.name, w.store, w.sched)
			continue
		}
		if r := s.Report; r == nil || r.Pods == nil || r.Pods.Scheduled != pods || r.Pods.Running != pods || r.ReadyNodes != nodes {
			t.Errorf("%s stack: paced pods not all scheduled and Running on %d Ready nodes: %+v", s.Name, nodes, r)
		}
		if s.Drain == nil || s.Drain.Bound != drain {
			t.Errorf("%s stack: drain %+v, want %d pods bound", s.Name, s.Drain, drain)
		}
		// The process kinds that ran, from the stack's own state (it outlives `down`).
		st, err := cluster.LoadState(filepath.Join(stateDir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, comp := range st.Components {
			kinds[comp.Kind] = true
			if comp.Alive() {
				t.Errorf("%s stack: %s (pid %d) still running after the demo", s.Name, comp.Name, comp.Pid)
			}
		}
		if !kinds[w.storeKind] || !kinds[w.schedKind] {
			t.Errorf("%s stack ran %v, want %s and %s", s.Name, kinds, w.storeKind, w.schedKind)
		}
		if _, err := os.Stat(filepath.Join(out, s.Name, "report.json")); err != nil {
			t.Errorf("%s stack: %v", s.Name, err)
		}
	}
	// Every row has both values, except the p99 of an API verb only one stack happened to serve in
	// a window of a few seconds (a node lease renewal or status update falling into one run only);
	// POST (the pods created) is served by both.
	for _, r := range c.Rows {
		if r.Meganode != nil && r.Stock != nil {
			continue
		}
		if strings.HasPrefix(r.Name, "API p99 ") && r.Name != "API p99 POST" {
			t.Logf("row %s: served by one stack only in this short run", r.Name)
			continue
		}
		t.Errorf("row %s: a missing value (meganode %v, stock %v)", r.Name, r.Meganode, r.Stock)
	}
	for _, r := range c.Rows {
		if r.Meganode != nil && r.Stock != nil && (*r.Meganode < 0 || *r.Stock < 0 || r.Ratio == nil) {
			t.Errorf("row %s: %v %v ratio %v", r.Name, *r.Meganode, *r.Stock, r.Ratio)
		}
	}

	// The printed table is comparison.json: the same rows, the same values.
	table := cluster.ParseTable(stdout.String())
	if len(table) != len(c.Rows) {
		t.Errorf("%d rows printed, %d in comparison.json", len(table), len(c.Rows))
	}
	for _, r := range c.Rows {
		cells, ok := table[cluster.RowLabel(r)]
		if !ok || cells[0] != cluster.FormatValue(r.Meganode) || cells[1] != cluster.FormatValue(r.Stock) ||
			cells[2] != cluster.FormatRatio(r.Ratio) || cells[3] != r.Better {
			t.Errorf("row %q: printed %v, comparison.json %s %s %s %s", cluster.RowLabel(r), cells,
				cluster.FormatValue(r.Meganode), cluster.FormatValue(r.Stock), cluster.FormatRatio(r.Ratio), r.Better)
		}
	}
	if left := cluster.ProcessesUnder(stateDir); len(left) > 0 {
		t.Errorf("processes still using %s after the demo: %v", stateDir, left)
	}
}

func lastLinesOf(s string, n int) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
