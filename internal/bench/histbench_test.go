package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func latencies(n int) []time.Duration {
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]time.Duration, n)
	for i := range v {
		v[i] = time.Duration(math.Exp(rng.NormFloat64()*1.2+math.Log(800e3))) + 50*time.Microsecond
	}
	return v
}

func BenchmarkRecordHdr(b *testing.B) {
	v, h := latencies(4096), NewHistogram()
	for i := 0; b.Loop(); i++ {
		h.Record(v[i&4095])
	}
}

// A 1000-client run: one histogram per worker, 200 ops each, merged.

func BenchmarkRun1000Hdr(b *testing.B) {
	v := latencies(4096)
	for b.Loop() {
		all := NewHistogram()
		for w := 0; w < 1000; w++ {
			h := NewHistogram()
			for i := 0; i < 200; i++ {
				h.Record(v[(w*200+i)&4095])
			}
			all.Merge(h)
		}
	}
}
