package bench

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// The client side of `bench apiserver-failover` (issue 36: kube-apiserver on a 3-member
// store, the store's leader SIGKILLed while pods are created): every API call as the client
// saw it, summarised per window (the minute before the kill, the minute after), and the
// order of the resourceVersions a watch delivered. The run itself is in cmd/meganode.

// CallSample is one API call (or one HTTP attempt of it) as the client saw it.
type CallSample struct {
	Start    time.Time     `json:"start"`
	Dur      time.Duration `json:"dur_ns"`
	Verb     string        `json:"verb"` // kube-apiserver's: POST, GET, LIST, PUT, …
	Resource string        `json:"resource"`
	Code     int           `json:"code,omitempty"` // HTTP status (0: no answer)
	// Err is "" for a success, else the error's class (code, reason, message without the
	// object's name) so that equal failures count together.
	Err string `json:"err,omitempty"`
	// Timeout: the error was a timeout (the server's Timeout/ServerTimeout, or the client's
	// deadline); RetryAfter: the answer carried Retry-After, which client-go obeys and retries.
	Timeout    bool `json:"timeout,omitempty"`
	RetryAfter bool `json:"retry_after,omitempty"`
}

// End is when the call returned.
func (c CallSample) End() time.Time { return c.Start.Add(c.Dur) }

// Window is a measured interval [From, To).
type Window struct {
	Name string    `json:"name"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Contains: t is in [From, To).
func (w Window) Contains(t time.Time) bool { return !t.Before(w.From) && t.Before(w.To) }

// Seconds is the window's length.
func (w Window) Seconds() float64 { return w.To.Sub(w.From).Seconds() }

// CallStats is the calls of one verb and resource that returned inside a window (as
// kube-apiserver's histograms observe a request when it ends: a call in flight at a kill
// belongs to the window after it): every call's latency counts, failed ones too (a failure's
// wait is part of what a client sees).
type CallStats struct {
	Verb     string  `json:"verb"`
	Resource string  `json:"resource"`
	Count    int     `json:"count"`
	Errors   int     `json:"errors"`
	PerSec   float64 `json:"per_sec"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// Percentile is the nearest-rank q-quantile of sorted (ascending): the smallest value with at
// least q of the values at or below it; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = min(max(k, 0), len(sorted)-1)
	return sorted[k]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// SummarizeCalls groups the calls that returned inside w by verb and resource, most calls first.
func SummarizeCalls(calls []CallSample, w Window) []CallStats {
	type key struct{ verb, res string }
	durs := map[key][]time.Duration{}
	errs := map[key]int{}
	for _, c := range calls {
		if !w.Contains(c.End()) {
			continue
		}
		k := key{c.Verb, c.Resource}
		durs[k] = append(durs[k], c.Dur)
		if c.Err != "" {
			errs[k]++
		}
	}
	var out []CallStats
	for k, d := range durs {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		s := CallStats{Verb: k.verb, Resource: k.res, Count: len(d), Errors: errs[k],
			P50Ms: ms(Percentile(d, 0.5)), P99Ms: ms(Percentile(d, 0.99)), MaxMs: ms(d[len(d)-1])}
		if sec := w.Seconds(); sec > 0 {
			s.PerSec = float64(len(d)) / sec
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Verb+out[i].Resource < out[j].Verb+out[j].Resource
	})
	return out
}

// ErrorCount is how often one class of error answered the calls that returned in a window.
type ErrorCount struct {
	Error      string `json:"error"`
	Count      int    `json:"count"`
	Timeout    bool   `json:"timeout"`
	RetryAfter bool   `json:"retry_after"`
}

// CountErrors counts the failed calls that returned inside w by error class, most frequent first.
func CountErrors(calls []CallSample, w Window) []ErrorCount {
	by := map[string]*ErrorCount{}
	for _, c := range calls {
		if c.Err == "" || !w.Contains(c.End()) {
			continue
		}
		e := by[c.Err]
		if e == nil {
			e = &ErrorCount{Error: c.Err, Timeout: c.Timeout, RetryAfter: c.RetryAfter}
			by[c.Err] = e
		}
		e.Count++
	}
	var out []ErrorCount
	for _, e := range by {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Error < out[j].Error
	})
	return out
}

// FirstSuccessAfter is the time from t to the return of the first successful call of verb
// (any verb when "") issued at or after t; false when none succeeded.
func FirstSuccessAfter(calls []CallSample, t time.Time, verb string) (time.Duration, bool) {
	best, ok := time.Duration(0), false
	for _, c := range calls {
		if c.Err != "" || c.Start.Before(t) || (verb != "" && c.Verb != verb) {
			continue
		}
		if d := c.End().Sub(t); !ok || d < best {
			best, ok = d, true
		}
	}
	return best, ok
}

// LongestAcross is the longest call of verb (any when "") in flight at t (started before it,
// returned after it): what the calls caught by the kill waited.
func LongestAcross(calls []CallSample, t time.Time, verb string) time.Duration {
	var longest time.Duration
	for _, c := range calls {
		if (verb != "" && c.Verb != verb) || !c.Start.Before(t) || c.End().Before(t) {
			continue
		}
		longest = max(longest, c.Dur)
	}
	return longest
}

// TimelineStep is the calls started in one step of a timeline.
type TimelineStep struct {
	Seconds float64 `json:"t"` // the step's start, from the timeline's origin
	Started int     `json:"started"`
	OK      int     `json:"ok"`
	Errors  int     `json:"errors"`
	MaxMs   float64 `json:"max_ms"`
}

// CallTimeline buckets the calls of verb (any when "") by their start into steps of step from
// origin, over [from, to) (offsets from origin; from may be negative), one entry per step.
func CallTimeline(calls []CallSample, verb string, origin time.Time, from, to, step time.Duration) []TimelineStep {
	if step <= 0 || to <= from {
		return nil
	}
	n := int((to - from + step - 1) / step)
	out := make([]TimelineStep, n)
	for i := range out {
		out[i].Seconds = (from + time.Duration(i)*step).Seconds()
	}
	for _, c := range calls {
		if verb != "" && c.Verb != verb {
			continue
		}
		off := c.Start.Sub(origin) - from
		if off < 0 {
			continue
		}
		i := int(off / step)
		if i >= n {
			continue
		}
		s := &out[i]
		s.Started++
		if c.Err == "" {
			s.OK++
		} else {
			s.Errors++
		}
		s.MaxMs = math.Max(s.MaxMs, ms(c.Dur))
	}
	return out
}

// RVOrder checks that the resourceVersions a watch delivers never go back: an event's is
// above every earlier one's, a bookmark's at least the last.
type RVOrder struct {
	Last      int64  `json:"last"`
	Events    int    `json:"events"`
	Bookmarks int    `json:"bookmarks"`
	Back      int    `json:"went_back"` // events (or bookmarks) below the last seen
	Repeated  int    `json:"repeated"`  // events at the last seen (delivered twice)
	First     string `json:"first_violation,omitempty"`
}

// Observe takes the next delivery's resourceVersion; what names it in the violation note.
func (o *RVOrder) Observe(rv int64, bookmark bool, what string) {
	switch {
	case rv < o.Last:
		o.Back++
		o.note(what, rv)
	case rv == o.Last && !bookmark && o.Events+o.Bookmarks > 0:
		o.Repeated++
		o.note(what, rv)
	}
	if bookmark {
		o.Bookmarks++
	} else {
		o.Events++
	}
	o.Last = max(o.Last, rv)
}

func (o *RVOrder) note(what string, rv int64) {
	if o.First == "" {
		o.First = fmt.Sprintf("%s at resourceVersion %d after %d", what, rv, o.Last)
	}
}

// OK: nothing went back or came twice.
func (o *RVOrder) OK() bool { return o.Back == 0 && o.Repeated == 0 }
