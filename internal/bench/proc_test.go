package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/procfs"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the last ')'.
	line := "4242 (my (weird) proc) S 1 4242 4242 0 -1 4194560 1234 0 0 0 1717 286 0 0 20 0 9 0 12345 1000000 500 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	u, s, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if u != 1717 || s != 286 {
		t.Fatalf("utime %d stime %d, want 1717 286", u, s)
	}
	if _, _, err := parseStat([]byte("garbage")); err == nil {
		t.Fatal("want an error without a command name")
	}
	if _, _, err := parseStat([]byte("1 (x) S 1 2")); err == nil {
		t.Fatal("want an error for a short line")
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tetcd\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 2000000 kB\nVmHWM:\t  123456 kB\n" +
		"VmRSS:\t  100000 kB\nRssAnon:\t   90000 kB\nThreads:\t17\n"
	rss, hwm, th := parseStatus([]byte(status))
	if rss != 100000*1024 || hwm != 123456*1024 || th != 17 {
		t.Fatalf("rss %d hwm %d threads %d", rss, hwm, th)
	}
}

func TestReadProcSelf(t *testing.T) {
	w := StartProcWatch(os.Getpid())
	deadline := time.Now().Add(60 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	w.Poll()
	u := w.Stop()
	if !u.Measured || u.PeakRSS == 0 || u.RSSBytes == 0 {
		t.Fatalf("self not measured: %+v", u)
	}
	if u.CPUMicros <= 0 { // 60 ms of spinning is at least one 10 ms tick
		t.Fatalf("no CPU time measured after spinning: %+v (x=%d)", u, x)
	}
	if got := StartProcWatch(0).Stop(); got.Measured {
		t.Fatal("pid 0 must measure nothing")
	}
}

func TestParseHostStat(t *testing.T) {
	h := hostCPU(procfs.CPUStat{User: 100, Nice: 5, System: 50, Idle: 1000, IOWait: 20, IRQ: 3, SoftIRQ: 2, Steal: 1})
	if h.Total != 100+5+50+1000+20+3+2+1 || h.Busy != 100+5+50 {
		t.Fatalf("%+v", h)
	}
	// 2 s window: 300 ticks busy = 3 s of CPU, server 1 s, client 0.5 s → 0.75 cores of others.
	got := OtherCores(HostCPU{Busy: 1000}, HostCPU{Busy: 1300}, ProcUsage{CPUMicros: 1e6}, ProcUsage{CPUMicros: 5e5}, 2)
	if got < 0.7499 || got > 0.7501 {
		t.Fatalf("other cores %v", got)
	}
	if _, err := ReadHostCPU(); err != nil {
		t.Fatal(err)
	}
}

// A file held open after its name is gone counts under its directory; a named one, or one
// outside the directory, does not (a walk of the directory counts those).
func TestUnlinkedBytes(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	open := func(d, name string, n int, unlink bool) *os.File {
		f, err := os.Create(filepath.Join(d, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if unlink {
			if err := os.Remove(f.Name()); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	a := open(dir, "gone", 10000, true)
	defer a.Close()
	b := open(dir, "named", 5000, false)
	defer b.Close()
	c := open(other, "gone-elsewhere", 7000, true)
	defer c.Close()
	if got := UnlinkedBytes(os.Getpid(), dir, false); got != 10000 {
		t.Fatalf("UnlinkedBytes = %d, want 10000", got)
	}
	if got := UnlinkedBytes(os.Getpid(), dir, true); got < 10000 {
		t.Fatalf("allocated UnlinkedBytes = %d, want >= 10000", got)
	}
}
