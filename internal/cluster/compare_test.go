package cluster

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func stackRun(name, store string, postP99, startupSec, podsPerSec, storeCPU float64, drain bool) StackRun {
	r := StackRun{Name: name, Store: store, Report: &Report{Seconds: 20, StoreNames: []string{"store"},
		APIByVerb:  []APILatency{{Verb: "POST", Count: 3000, P99: postP99}, {Verb: "PATCH", Count: 1000, P99: 0.02}},
		Pods:       &PodRun{Count: 100, Running: 100, StartupP99Sec: startupSec},
		Components: []Usage{{Name: "store", CPUSeconds: storeCPU, PeakRSSMiB: 50}, {Name: "kube-apiserver", CPUSeconds: 9}}}}
	if drain {
		r.Drain = &DrainRun{Pods: 100, Bound: 100, PodsPerSec: podsPerSec, CPUMsPerPod: 2}
	}
	return r
}

func row(t *testing.T, c *Comparison, name string) CompareRow {
	t.Helper()
	for _, r := range c.Rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, c.Rows)
	return CompareRow{}
}

func TestCompareRowsAndRatios(t *testing.T) {
	mega := stackRun(StackMeganode, StoreMeganode, 0.010, 0.5, 400, 1, true)
	stock := stackRun(StackStock, StoreEtcd, 0.020, 1.0, 200, 4, true)
	stock.Report.APIByVerb = append(stock.Report.APIByVerb, APILatency{Verb: "DELETE", Count: 5, P99: 0.003})
	c := Compare(50, 100, 50, 100, mega, stock)

	if r := row(t, c, "API p99 POST"); *r.Meganode != 10 || *r.Stock != 20 || *r.Ratio != 0.5 || r.Better != BetterLower {
		t.Errorf("POST row: %+v", r)
	}
	if r := row(t, c, "pods scheduled in the drain"); *r.Ratio != 2 || r.Better != BetterHigher {
		t.Errorf("drain row: %+v", r)
	}
	if r := row(t, c, "store CPU in the paced window"); *r.Ratio != 0.25 {
		t.Errorf("store CPU row: %+v", r)
	}
	// A verb only one stack served is missing for the other, not zero, and has no ratio.
	if r := row(t, c, "API p99 DELETE"); r.Meganode != nil || r.Stock == nil || r.Ratio != nil {
		t.Errorf("DELETE row: %+v", r)
	}
	if c.Complete() {
		t.Error("Complete with a missing cell")
	}
	if c.Rows[0].Name != "API p99 POST" {
		t.Errorf("the busiest verb first: %v", c.Rows[0].Name)
	}
}

func TestCompareMissingStack(t *testing.T) {
	mega := stackRun(StackMeganode, StoreMeganode, 0.01, 0.5, 400, 1, false) // no drain
	mega.Report.Pods.Running = 99                                            // one pod never ran
	mega.Report.Components = nil                                             // store not measured
	stock := StackRun{Name: StackStock, Store: StoreEtcd, Error: "up: boom"} // failed before any figure
	c := Compare(50, 100, 50, 100, mega, stock)
	for _, r := range c.Rows {
		if r.Stock != nil || r.Ratio != nil {
			t.Errorf("%s: the failed stack has a value: %+v", r.Name, r)
		}
		if !strings.HasPrefix(r.Name, "API p99") && r.Meganode != nil {
			t.Errorf("%s: meganode value without its measurement: %v", r.Name, *r.Meganode)
		}
	}
	if len(c.Notes) == 0 || !strings.Contains(c.Notes[0], "boom") {
		t.Errorf("notes: %v", c.Notes)
	}
	var buf bytes.Buffer
	c.Print(&buf)
	if !strings.Contains(buf.String(), "pod startup p99 (ms)  ") || strings.Count(buf.String(), Missing) < len(c.Rows) {
		t.Errorf("missing cells not printed as %q:\n%s", Missing, buf.String())
	}
}

// The printed table and comparison.json carry the same rows and values.
func TestComparePrintMatchesJSON(t *testing.T) {
	c := Compare(50, 100, 50, 100, stackRun(StackMeganode, StoreMeganode, 0.0123, 0.5, 400, 1, true),
		stackRun(StackStock, StoreEtcd, 0.0456, 1.0, 200, 4, true))
	var buf bytes.Buffer
	c.Print(&buf)
	p, err := c.WriteJSON(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || filepath.Base(p) != "comparison.json" {
		t.Fatal(p, err)
	}
	var back Comparison
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	table := ParseTable(buf.String())
	if len(table) != len(back.Rows) || len(table) == 0 {
		t.Fatalf("%d printed rows, %d in JSON:\n%s", len(table), len(back.Rows), buf.String())
	}
	for _, r := range back.Rows {
		cells, ok := table[RowLabel(r)]
		if !ok || cells[0] != FormatValue(r.Meganode) || cells[1] != FormatValue(r.Stock) || cells[2] != FormatRatio(r.Ratio) || cells[3] != r.Better {
			t.Errorf("row %q: printed %v, JSON %+v", RowLabel(r), cells, r)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{1234.5: "1234", 45.67: "45.7", 4.567: "4.57", 0.01234: "0.012", 0: "0.000"} {
		if got := FormatValue(&v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
	if FormatValue(nil) != Missing || FormatRatio(nil) != "–" {
		t.Error("missing")
	}
	nan := math.NaN()
	if ms(nan) != nil {
		t.Error("NaN seconds must be missing")
	}
}
