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

func TestSummarise(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	r := summarise("d", 4096, s)
	if r.P50ms != 50 || r.P99ms != 99 || r.Maxms != 100 || r.Meanms != 50.5 || r.Samples != 100 {
		t.Errorf("1..100 ms: %+v", r)
	}
	if s[0] != 100*time.Millisecond {
		t.Error("summarise reordered its input")
	}
	if r := summarise("d", 1, []time.Duration{7 * time.Millisecond}); r.P50ms != 7 || r.P99ms != 7 || r.Maxms != 7 {
		t.Errorf("single sample: %+v", r)
	}
	if r := summarise("d", 1, nil); r.P99ms != 0 || r.Samples != 0 {
		t.Errorf("no samples: %+v", r)
	}
}
