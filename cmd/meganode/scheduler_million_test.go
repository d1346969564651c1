package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `scheduler million` at a small size: every pod bound, no node over-committed, the report's
// fields present, and the figures not measured (no ranking, no prediction) printed as missing
// and null in the JSON, never as zero.
func TestSchedulerMillionSmall(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "m.json")
	code, out, errOut := execute(t, "scheduler", "million", "--nodes", "200", "--pods", "200", "--shards", "4",
		"--calibrate", "0", "--predict=false", "--rank-sample", "0", "--json", js)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"top 5 %: missing", "model: missing"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nodes", "pods", "bound", "wall_seconds", "cpu_seconds", "peak_rss_bytes",
		"stddev_pods_per_node", "max_pods_per_node", "empty_nodes", "top5_share", "model", "timeline"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if rep["bound"] != 200.0 || rep["overcommitted_nodes"] != 0.0 || rep["top5_share"] != nil || rep["model"] != nil {
		t.Errorf("bound %v, over-committed %v, top5_share %v, model %v", rep["bound"], rep["overcommitted_nodes"], rep["top5_share"], rep["model"])
	}
	cpu, _ := rep["cpu_seconds"].(map[string]any)
	if cpu["total"] == nil {
		t.Errorf("cpu_seconds %v", cpu)
	}
	// Per role when the profile sampled the run (a 10 ms period; else the roles are missing).
	if rep["cpu_profiled_seconds"] != 0.0 && (cpu["shard"] == nil || cpu["collector"] == nil || cpu["relay"] == nil || cpu["intake"] == nil) {
		t.Errorf("cpu_seconds %v", cpu)
	}
	if _, err := os.Stat(filepath.Join(dir, "m.png")); err != nil {
		t.Errorf("chart: %v", err)
	}
}
