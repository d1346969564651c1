package bench

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 100 * time.Millisecond}, {0.99, 198 * time.Millisecond}, {1, 200 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(d, c.q); got != c.want {
			t.Errorf("p%v of 1..200 ms = %v, want %v", c.q*100, got, c.want)
		}
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
	// One slow call in a hundred is the p99; one in two hundred is not.
	d = make([]time.Duration, 100)
	for i := range d {
		d[i] = 5 * time.Millisecond
	}
	d[99] = 3 * time.Second
	if got := Percentile(d, 0.99); got != 5*time.Millisecond {
		t.Errorf("p99 with 1 slow of 100 = %v, want 5ms (rank 99)", got)
	}
	d = append(d, 3*time.Second)
	if got := Percentile(d, 0.99); got != 3*time.Second {
		t.Errorf("p99 with 2 slow of 101 = %v, want 3s", got)
	}
}

// calls: 10 creates a second for 20 s from t0, each 10 ms; at t0+10s (the "kill") the creates
// of the next half second fail with a timeout and take 2 s, one of them with a non-timeout error.
func failoverCalls(t0 time.Time) []CallSample {
	var out []CallSample
	for i := 0; i < 200; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		c := CallSample{Start: at, Dur: 10 * time.Millisecond, Verb: "POST", Resource: "pods", Code: 201}
		if off := at.Sub(t0); off >= 10*time.Second && off < 10500*time.Millisecond {
			c.Dur, c.Code, c.Err, c.Timeout, c.RetryAfter = 2*time.Second, 500, "500 ServerTimeout: timed out", true, true
			if off == 10*time.Second {
				c.Err, c.Timeout, c.RetryAfter = "500 InternalError: leader changed", false, false
			}
		}
		out = append(out, c)
	}
	out = append(out, CallSample{Start: t0.Add(15 * time.Second), Dur: 3 * time.Millisecond, Verb: "GET", Resource: "pods", Code: 200})
	return out
}

func TestSummarizeCallsPerWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := failoverCalls(t0)
	before := Window{Name: "before", From: t0, To: t0.Add(10 * time.Second)}
	after := Window{Name: "after", From: t0.Add(10 * time.Second), To: t0.Add(20 * time.Second)}

	b := SummarizeCalls(calls, before)
	if len(b) != 1 || b[0].Verb != "POST" || b[0].Count != 100 || b[0].Errors != 0 || b[0].P99Ms != 10 || b[0].PerSec != 10 {
		t.Fatalf("before: %+v", b)
	}
	a := SummarizeCalls(calls, after)
	if len(a) != 2 || a[0].Verb != "POST" || a[0].Count != 100 || a[0].Errors != 5 || a[1].Verb != "GET" || a[1].Count != 1 {
		t.Fatalf("after: %+v", a)
	}
	// 5 of 100 calls took 2 s: the p99 is 2 s, the p50 10 ms.
	if a[0].P99Ms != 2000 || a[0].P50Ms != 10 || a[0].MaxMs != 2000 {
		t.Errorf("after POST p50/p99/max = %v/%v/%v ms, want 10/2000/2000", a[0].P50Ms, a[0].P99Ms, a[0].MaxMs)
	}
	if !after.Contains(t0.Add(10*time.Second)) || before.Contains(t0.Add(10*time.Second)) {
		t.Error("window bounds: want [From, To)")
	}
	// A call belongs to the window it returned in: one in flight at the boundary (a kill) is
	// the window after's, as kube-apiserver's histogram observes it when it ends.
	across := append(calls, CallSample{Start: t0.Add(9950 * time.Millisecond), Dur: time.Second, Verb: "POST", Resource: "pods", Err: "500: EOF"})
	if b := SummarizeCalls(across, before); b[0].Count != 100 {
		t.Errorf("before, with a call across the boundary: %+v", b)
	}
	if a := SummarizeCalls(across, after); a[0].Count != 101 || a[0].Errors != 6 {
		t.Errorf("after, with a call across the boundary: %+v", a)
	}
	if e := CountErrors(across, after); len(e) != 3 {
		t.Errorf("errors after, with a call across the boundary: %+v", e)
	}

	errs := CountErrors(calls, after)
	if len(errs) != 2 || errs[0].Count != 4 || !errs[0].Timeout || !errs[0].RetryAfter || errs[1].Count != 1 || errs[1].Timeout {
		t.Errorf("errors after: %+v", errs)
	}
	if e := CountErrors(calls, before); len(e) != 0 {
		t.Errorf("errors before: %+v", e)
	}
}

func TestFirstSuccessAndLongestAcrossTheKill(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := failoverCalls(t0)
	kill := t0.Add(10 * time.Second)
	// The first create issued after the kill that succeeds is the one at +10.5 s (10 ms).
	d, ok := FirstSuccessAfter(calls, kill, "POST")
	if !ok || d != 510*time.Millisecond {
		t.Errorf("first success after the kill: %v %v, want 510ms", d, ok)
	}
	if _, ok := FirstSuccessAfter(calls, t0.Add(time.Hour), ""); ok {
		t.Error("a success after the last call")
	}
	// A 2 s call issued 0.1 s before a kill at +10.15 s is in flight across it.
	if got := LongestAcross(calls, t0.Add(10150*time.Millisecond), "POST"); got != 2*time.Second {
		t.Errorf("longest across: %v, want 2s", got)
	}
	if got := LongestAcross(calls, t0.Add(5005*time.Millisecond), ""); got != 10*time.Millisecond {
		t.Errorf("longest across a quiet moment: %v, want 10ms", got)
	}
}

func TestCallTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := failoverCalls(t0)
	kill := t0.Add(10 * time.Second)
	tl := CallTimeline(calls, "POST", kill, -2*time.Second, 3*time.Second, time.Second)
	if len(tl) != 5 {
		t.Fatalf("%d steps, want 5", len(tl))
	}
	if tl[0].Seconds != -2 || tl[2].Seconds != 0 {
		t.Errorf("step starts %v, %v, want -2, 0", tl[0].Seconds, tl[2].Seconds)
	}
	if tl[1].Started != 10 || tl[1].Errors != 0 || tl[1].MaxMs != 10 {
		t.Errorf("second before the kill: %+v", tl[1])
	}
	if tl[2].Started != 10 || tl[2].Errors != 5 || tl[2].OK != 5 || tl[2].MaxMs != 2000 {
		t.Errorf("second of the kill: %+v", tl[2])
	}
	if CallTimeline(calls, "", kill, 0, 0, time.Second) != nil {
		t.Error("an empty range has no steps")
	}
}

func TestRVOrder(t *testing.T) {
	var o RVOrder
	for _, rv := range []int64{10, 11, 15} {
		o.Observe(rv, false, "ADDED p")
	}
	o.Observe(15, true, "bookmark") // a bookmark at the last event's revision is fine
	o.Observe(20, true, "bookmark")
	o.Observe(21, false, "MODIFIED p")
	if !o.OK() || o.Events != 4 || o.Bookmarks != 2 || o.Last != 21 {
		t.Fatalf("in order: %+v", o)
	}
	o.Observe(21, false, "MODIFIED q") // the same revision twice
	o.Observe(19, false, "ADDED r")    // back
	if o.OK() || o.Repeated != 1 || o.Back != 1 || o.Last != 21 {
		t.Fatalf("violations: %+v", o)
	}
	if o.First != "MODIFIED q at resourceVersion 21 after 21" {
		t.Errorf("first violation %q", o.First)
	}
}
