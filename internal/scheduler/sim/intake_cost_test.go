package sim

import (
	"context"
	"testing"
)

// The intake measurement sends every pod once, as singles to d shards or as full batches, and
// charges it some CPU.
func TestMeasureIntake(t *testing.T) {
	// 3000 = 93·32 + 24: 94 frames, a few more when the senders empty the queue before the watch
	// has handed every pod over (a batch is then flushed early, as in a run).
	for _, c := range []struct{ batch, frames int }{{1, 3000}, {32, 94}} {
		got, err := MeasureIntake(context.Background(), 3000, 4, 2, c.batch)
		if err != nil {
			t.Fatalf("batch %d: %v", c.batch, err)
		}
		if got.Frames < int64(c.frames) || got.Frames > int64(c.frames+c.frames/8) || got.CPUUsPerPod <= 0 {
			t.Fatalf("batch %d: %d frames (want %d, or up to ⅛ more), %.1f µs CPU per pod", c.batch, got.Frames, c.frames, got.CPUUsPerPod)
		}
		t.Logf("batch %d: %d frames, %.1f µs CPU per pod", c.batch, got.Frames, got.CPUUsPerPod)
	}
}
