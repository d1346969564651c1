package bench

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuf is a bytes.Buffer the progress goroutine and the test can share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// runPhase counts up to n over about dur, as a measured phase would.
func runPhase(p *Progress, label string, total int64, dur time.Duration, n int64) {
	var c atomic.Int64
	p.Start(label, total, dur, c.Load)
	steps := min(n, 10)
	for i := int64(0); i < steps; i++ {
		c.Add(n / steps)
		time.Sleep(dur / time.Duration(steps))
	}
	c.Add(n % steps)
	p.Done()
}

func TestProgressPlainDoesNotSpam(t *testing.T) {
	var b syncBuf
	p := NewProgressWriter(&b, false)
	p.interval = 100 * time.Millisecond // 5 s in real use; short here so that a line is due
	p.Phase("put meganode c=1: setup")
	runPhase(p, "put meganode c=1", 0, 350*time.Millisecond, 1000)
	p.Printf("after %d", 1)
	out := b.String()
	if strings.ContainsAny(out, "\r\033") {
		t.Errorf("control characters in a non-terminal's output: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// setup, ~3 periodic lines (one per interval, not one per op), done, after
	if len(lines) < 4 || len(lines) > 7 {
		t.Errorf("%d lines, want one per interval:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "put meganode c=1: setup") || !strings.Contains(lines[1], "% ") ||
		!strings.HasPrefix(lines[len(lines)-2], "put meganode c=1 done: 1000 ops in") || lines[len(lines)-1] != "after 1" {
		t.Errorf("unexpected output:\n%s", out)
	}
}

func TestProgressBarOnTerminal(t *testing.T) {
	var b syncBuf
	p := NewProgressWriter(&b, true)
	p.interval = 20 * time.Millisecond
	runPhase(p, "creating 500 nodes", 500, 200*time.Millisecond, 500)
	out := b.String()
	t.Logf("%q", out)
	if !strings.Contains(out, "creating 500 nodes") || !strings.Contains(out, "ops") || !strings.Contains(out, "/500") {
		t.Errorf("no bar with a count drawn: %q", out)
	}
	if !strings.Contains(out, "\r") {
		t.Errorf("the bar is not redrawn in place: %q", out)
	}
	last := out[strings.LastIndex(out, "\r")+1:]
	if !strings.Contains(last, "creating 500 nodes done: 500 ops in") || !strings.HasSuffix(last, "\n") {
		t.Errorf("the bar does not end in the done line: %q", last)
	}
	// a time-bound phase, and nothing printed by a nil Progress
	b2 := &syncBuf{}
	p2 := NewProgressWriter(b2, true)
	p2.interval = 20 * time.Millisecond
	runPhase(p2, "measuring 200ms", 0, 200*time.Millisecond, 50)
	t.Logf("%q", b2.String())
	if !strings.Contains(b2.String(), "measuring 200ms done: 50 ops") {
		t.Errorf("time-bound phase: %q", b2.String())
	}
	var none *Progress
	none.Phase("x")
	none.Printf("y")
	runPhase(none, "z", 1, time.Millisecond, 1)
}
