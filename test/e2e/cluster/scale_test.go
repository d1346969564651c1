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

// TestBenchScale runs `meganode bench scale` (make scale) at a small size on both stacks: every
// node Ready with its Lease, every pod bound once (pods/binding answered OK once per pod) on a
// node that is not over-committed, the report's figures present, and none of its missing
// figures printed as zero. Speed is not asserted. The 12 s quiet window sees each node's lease renewed
// (every 10 s at 20 nodes): the renewal rate is measured, not missing.
func TestBenchScale(t *testing.T) {
	bd := binDir(t)
	const nodes, pods = 20, 40
	dir := t.TempDir()
	stateDir, out := filepath.Join(dir, "state"), filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bd, "meganode"), "bench", "scale", "--nodes", "20", "--pods", "40", "--stack", "both",
		"--hold", "12s", "--state-dir", stateDir, "--out", out)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) } // let it stop its clusters
	cmd.WaitDelay = 30 * time.Second
	defer func() {
		for _, name := range []string{cluster.StackMeganode, cluster.StackStock} {
			_ = cluster.Down(filepath.Join(stateDir, name+"-20"), nil)
		}
	}()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	t.Logf("meganode bench scale in %.1fs; stdout:\n%s", time.Since(began).Seconds(), stdout.String())
	if err != nil {
		t.Fatalf("meganode bench scale: %v; stderr:\n%s", err, lastLinesOf(stderr.String(), 40))
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r cluster.ScaleReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Stacks) != 2 {
		t.Fatalf("%d stacks in report.json, want 2", len(r.Stacks))
	}
	for _, s := range r.Stacks {
		if len(s.Runs) != 1 || s.LargestHeld == nil || *s.LargestHeld != nodes || s.StoppedAt != nil {
			t.Errorf("%s stack: %d runs, largest held %v, stopped at %v (%s)", s.Name, len(s.Runs), s.LargestHeld, s.StoppedAt, s.StoppedBy)
			continue
		}
		run := s.Runs[0]
		if !run.Held || run.Nodes != nodes || run.Pods != pods || run.NodesReady != nodes || run.Leases < nodes || run.PodsBound != pods {
			t.Errorf("%s stack: %+v", s.Name, run)
		}
		if run.BindingsOK == nil || *run.BindingsOK != pods {
			t.Errorf("%s stack: %v pods/binding answered OK, want %d (every pod bound once)", s.Name, run.BindingsOK, pods)
		}
		if p := run.Placement; p == nil || p.Bound != pods || p.OverCommitted != 0 {
			t.Errorf("%s stack: placement %+v", s.Name, p)
		}
		for name, v := range map[string]*float64{"nodes_ready_seconds": run.NodesReadySeconds, "pods_placed_seconds": run.PodsPlacedSeconds,
			"pods_per_sec": run.PodsPerSec, "lease_renewals_per_sec": run.LeaseRenewalsPerSec, "up_seconds": run.UpSeconds, "nodes_schedulable_seconds": run.NodesSchedulableSeconds} {
			if v == nil || *v <= 0 {
				t.Errorf("%s stack: %s = %v", s.Name, name, v)
			}
		}
		if run.APISLOMet == nil || len(run.APIByVerb) == 0 {
			t.Errorf("%s stack: no API latency", s.Name)
		}
		comps := map[string]bool{}
		for _, u := range run.Components {
			comps[u.Name] = u.PodsCores != nil && u.PeakRSSMiB != nil
		}
		if !comps["kube-apiserver"] {
			t.Errorf("%s stack: kube-apiserver CPU and RSS not measured: %+v", s.Name, run.Components)
		}
		st, err := cluster.LoadState(run.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Components {
			if c.Alive() {
				t.Errorf("%s stack: %s (pid %d) still running after the run", s.Name, c.Name, c.Pid)
			}
		}
	}
	// The summary prints a cell of a figure not measured as "missing", never as 0: every row
	// whose JSON is null in a run shows "missing" in that run's column.
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(l, "| API p99 ") {
			for _, c := range strings.Split(l, "|")[2:] {
				if c = strings.TrimSpace(c); c == "0" || c == "0.000" {
					t.Errorf("summary row %q: a zero latency", l)
				}
			}
		}
	}
	if left := cluster.ProcessesUnder(stateDir); len(left) > 0 {
		t.Errorf("processes still using %s after the run: %v", stateDir, left)
	}
}
