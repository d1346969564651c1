package bench

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestBucketsCoverAndOrder(t *testing.T) {
	prevHi := uint64(0)
	for i := 0; i < histBuckets; i++ {
		lo, hi := bucketRange(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d] maps to %d/%d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= histLinear && float64(hi-lo+1)/float64(lo) > 1.0/64+1e-9 {
			t.Fatalf("bucket %d too wide: [%d,%d]", i, lo, hi)
		}
		prevHi = hi
	}
	if bucketOf(math.MaxUint64) != histBuckets-1 {
		t.Fatalf("huge values must clamp to the last bucket")
	}
}

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
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.016 {
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
	if got := h.Quantile(0.5); got != 50 {
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
		if math.Abs(c.got-c.want)/c.want > 0.016 {
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
	if a.Count() != 3 || a.Max() != 3*time.Millisecond || a.Min() != 0 {
		t.Fatalf("merge: count %d max %v min %v", a.Count(), a.Max(), a.Min())
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
