package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	r := int(math.Ceil(q*float64(len(sorted)))) - 1
	if r < 0 {
		r = 0
	}
	return sorted[r]
}

func TestQuantilesWithinBucketError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var vals []time.Duration
	h := NewHistogram()
	for i := 0; i < 200000; i++ {
		// log-normal-ish latencies from ~50 µs to ~50 ms
		v := time.Duration(math.Exp(rng.NormFloat64()*1.2+math.Log(800e3))) + 50*time.Microsecond
		vals = append(vals, v)
		h.Record(v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		got, want := h.Quantile(q), exactQuantile(vals, q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 1.0/128 {
			t.Errorf("p%v: got %v, exact %v (%.2f%% off)", q*100, got, want, rel*100)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] {
		t.Errorf("min/max not exact: %v/%v vs %v/%v", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count %d", h.Count())
	}
}

func TestSmallAndUniform(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i)) // exact region
	}
	if got := h.Quantile(0.5); got != 50 { // values below 256 ns are exact
		t.Errorf("p50 of 1..100 ns = %v", got)
	}
	if got := h.Quantile(0.99); got != 99 {
		t.Errorf("p99 of 1..100 ns = %v", got)
	}
	if got := h.Mean(); got != 50 { // 50.5 truncated
		t.Errorf("mean = %v", got)
	}
	u := NewHistogram()
	for i := 1; i <= 10000; i++ {
		u.Record(time.Duration(i) * time.Microsecond)
	}
	s := u.Summary()
	for _, c := range []struct{ got, want float64 }{{s.P50Us, 5000}, {s.P90Us, 9000}, {s.P99Us, 9900}, {s.P999Us, 9990}, {s.MaxUs, 10000}} {
		if math.Abs(c.got-c.want)/c.want > 1.0/128 {
			t.Errorf("got %v want ≈%v", c.got, c.want)
		}
	}
}

func TestMergeAndEmpty(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	if a.Quantile(0.99) != 0 || a.Mean() != 0 || a.Min() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(-5) // clamps to 0
	a.Merge(b)
	a.Merge(nil)
	a.Merge(NewHistogram())
	if a.Count() != 3 || a.Max() != 3*time.Millisecond || a.Min() != 0 {
		t.Fatalf("merge: count %d max %v min %v", a.Count(), a.Max(), a.Min())
	}
	if got := a.Quantile(0.5); got < time.Millisecond || got > time.Millisecond+time.Millisecond/128 {
		t.Errorf("p50 of {0, 1 ms, 3 ms} = %v", got)
	}
	c := NewHistogram()
	c.Record(3 * time.Hour) // beyond the range: clamped to an hour, not lost
	if c.Count() != 1 || c.Max() != time.Hour || c.Quantile(0.99) != time.Hour {
		t.Errorf("clamp: count %d max %v p99 %v", c.Count(), c.Max(), c.Quantile(0.99))
	}
}

func TestMedian(t *testing.T) {
	if median(nil) != 0 || median([]float64{3}) != 3 || median([]float64{5, 1, 3}) != 3 || median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Fatal("median")
	}
	xs := []float64{3, 1, 2}
	median(xs)
	if xs[0] != 3 {
		t.Fatal("median must not reorder its input")
	}
}

// The slowest 0.1 % are barred on 1-2-5 bounds from p99.9 to the maximum.
func TestSlowest(t *testing.T) {
	h := NewHistogram()
	for i := 0; i < 99_900; i++ {
		h.Record(time.Millisecond)
	}
	for i := 0; i < 50; i++ {
		h.Record(15 * time.Millisecond)
	}
	for i := 0; i < 40; i++ {
		h.Record(40 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		h.Record(300 * time.Millisecond)
	}
	bars := h.Slowest()
	var got []string
	var n int64
	for _, b := range bars {
		got = append(got, fmt.Sprintf("%.0f-%.0f:%d", b.FromUs/1e3, b.ToUs/1e3, b.Count))
		n += b.Count
	}
	want := []string{"10-20:50", "20-50:40", "200-300:10"}
	if n != 100 || len(got) != len(want) {
		t.Fatalf("bars %v (%d requests), want %v", got, n, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("bars %v, want %v", got, want)
		}
	}
	if s := FmtSlowest(bars); !strings.Contains(s, ": 50") {
		t.Fatalf("FmtSlowest = %q", s)
	}
}
