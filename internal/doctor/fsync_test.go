package doctor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMeasureFsync(t *testing.T) {
	dir := t.TempDir()
	r, err := MeasureFsync(dir, FsyncOptions{Samples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 20 || r.BlockSize != 2300 || r.Dir != dir {
		t.Errorf("result %+v", r)
	}
	if r.P50ms <= 0 || r.P99ms < r.P50ms || r.Maxms < r.P99ms || r.Meanms <= 0 {
		t.Errorf("inconsistent latencies %+v", r)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("test file left behind: %v", left)
	}
	t.Logf("fsync in %s: p50 %.3f ms p99 %.3f ms", dir, r.P50ms, r.P99ms)
}

func TestMeasureFsyncErrors(t *testing.T) {
	if _, err := MeasureFsync(filepath.Join(t.TempDir(), "missing"), FsyncOptions{Samples: 1}); err == nil {
		t.Error("missing directory accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := MeasureFsync(f, FsyncOptions{Samples: 1}); err == nil {
		t.Error("a file accepted as directory")
	}
}

func TestMeasureFsyncMaxTime(t *testing.T) {
	r, err := MeasureFsync(t.TempDir(), FsyncOptions{Samples: 1_000_000, MaxTime: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 10 {
		t.Errorf("stopped after %d samples, want 10 (the minimum)", r.Samples)
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}, {99.9, 100 * time.Millisecond}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty percentile")
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("single sample p99 = %v", got)
	}
}
