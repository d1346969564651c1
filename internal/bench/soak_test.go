package bench

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The summary of etcd 3.6's `benchmark put` (pkg/report), as the soak reads it.
const benchmarkReport = `
Summary:
  Total:	61.0123 secs.
  Slowest:	0.5751 secs.
  Fastest:	0.0002 secs.
  Average:	0.0021 secs.
  Stddev:	0.0101 secs.
  Requests/sec:	4999.7521

Response time histogram:
  0.0002 [1]	|
  0.0577 [304980]	|∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎

Latency distribution:
  10% in 0.0006 secs.
  50% in 0.0011 secs.
  99% in 0.0123 secs.
  99.9% in 0.2530 secs.

Error distribution:
  [3]	context deadline exceeded
  [2]	etcdserver: too many requests
`

func TestParseBenchmarkReport(t *testing.T) {
	var s SoakSample
	if err := ParseBenchmarkReport(benchmarkReport, &s); err != nil {
		t.Fatal(err)
	}
	if s.MaxMs != 575.1 || s.P50Ms != 1.1 || s.P99Ms != 12.3 || s.P999Ms != 253 || s.OpsPerSec != 4999.7521 || s.Errors != 5 {
		t.Fatalf("parsed %+v", s)
	}
	if err := ParseBenchmarkReport("no report", &s); err == nil {
		t.Fatal("a missing report parsed")
	}
}

// The soak's charts from a recorded run (docs/bench/soak/short-5m): three PNGs, one series per target.
func TestSoakChartsFromRecordedRun(t *testing.T) {
	b, err := os.ReadFile("../../docs/bench/soak/short-5m/soak.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Results []*SoakResult }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out := os.Getenv("CHART_OUT"); out != "" {
		dir = out
	}
	cs := SoakCharts(rec.Results)
	if err := WritePNGs(dir, cs); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		f, err := os.Open(filepath.Join(dir, c.Slug+".png"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.Slug, err)
		}
		for _, s := range c.Chart.Series {
			if n := near(img, s.Color); n < 400 {
				t.Errorf("%s: series %q has %d pixels of its colour", c.Slug, s.Name, n)
			}
		}
	}
	if len(cs) != 3 || len(rec.Results) != 2 {
		t.Errorf("%d charts from %d targets", len(cs), len(rec.Results))
	}
}
