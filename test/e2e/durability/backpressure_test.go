package durability

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/storeproc"
)

// The back-pressure gate (docs/design.md §5, "A slow disk"; server/backpressure.rs): with
// 300 ms per fsync and 6,000 writes in flight at once on an fsync prefix — more than the
// 5,000 committed-but-not-durable revisions the gate allows — writes wait at the gate before
// they commit (meganode_write_backpressure_waits_total moves), and every one is acknowledged.
// With fewer writers in flight than the bound (TestSlowDiskFsync's 1,000) the gate is not hit.
func TestBackPressureGate(t *testing.T) {
	const (
		writers  = 6000
		conns    = 50
		injected = 300 * time.Millisecond
	)
	p, cs := startWithClients(t, "256m", conns, "--durability=fsync", "--test-fault-fsync-latency="+injected.String())
	if n := metric(t, p, "meganode_write_backpressure_waits_total"); n != 0 {
		t.Fatalf("gate hit before any load: %v", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 2; j++ {
				if _, err := cs[w%conns].Put(ctx, fmt.Sprintf("/registry/pods/bp/k%05d-%d", w, j), "v"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	waits := metric(t, p, "meganode_write_backpressure_waits_total")
	t.Logf("%d writers × 2 puts with %v per fsync: %d acknowledged in %v, %v waited at the gate", writers, injected, acked.Load(), took.Round(time.Millisecond), waits)
	if failed.Load() > 0 {
		t.Fatalf("%d puts failed, first: %v", failed.Load(), firstErr.Load())
	}
	if waits == 0 {
		t.Fatalf("%d writes in flight on a %v fsync and none waited at the gate", writers, injected)
	}
}

// metric reads one unlabelled sample from the store's /metrics.
func metric(t *testing.T, p *storeproc.Proc, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in %s/metrics", name, p.MetricsURL)
	return 0
}
