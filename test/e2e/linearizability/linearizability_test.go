package linearizability

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/storeproc"
)

// Environment (`make test-long` raises the first two):
//
//	MEGANODE_LIN_DURATION  load duration of the store run (default 3s)
//	MEGANODE_LIN_RESTARTS  SIGKILL restarts during it (default 2)
//	MEGANODE_LIN_CLIENTS   concurrent clients (default 8)
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n >= 0 {
		return n
	}
	return def
}

// storeCluster is the real meganode-store binary with the test prefix in fsync mode.
type storeCluster struct{ p *storeproc.Proc }

func (s *storeCluster) Endpoint() string { return s.p.Endpoint }
func (s *storeCluster) Kill() error      { return s.p.Kill() }
func (s *storeCluster) Start() error     { return s.p.Restart() }

func startStore(t *testing.T) *storeCluster {
	t.Helper()
	p, err := storeproc.Start(storeproc.Options{DataDir: t.TempDir(), ExtraArgs: []string{
		"--durability=buffered", "--durability-prefix=" + testPrefix + "=fsync"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	return &storeCluster{p}
}

type etcdCluster struct{ s *etcdref.Server }

func (e *etcdCluster) Endpoint() string { return e.s.Endpoint }
func (e *etcdCluster) Kill() error      { panic("the embedded etcd is not killed") }
func (e *etcdCluster) Start() error     { panic("the embedded etcd is not restarted") }

func summarize(t *testing.T, h *History, took time.Duration) {
	t.Helper()
	counts := map[opKind][2]int{}
	for i := range h.Ops {
		c := counts[h.Ops[i].Kind]
		if h.Ops[i].unknown() {
			c[1]++
		} else {
			c[0]++
		}
		counts[h.Ops[i].Kind] = c
	}
	for k := opGet; k <= opRange; k++ {
		t.Logf("%-16s %6d acknowledged, %d failed/unknown", k, counts[k][0], counts[k][1])
	}
	t.Logf("%d ops, %d events in the store's history, %d watchers; checked in %v", len(h.Ops), len(h.Final), len(h.Watches), took)
}

func check(t *testing.T, h *History) Report {
	t.Helper()
	start := time.Now()
	rep := checkHistory(h, 5*time.Minute)
	summarize(t, h, time.Since(start))
	return rep
}

func requireClean(t *testing.T, h *History) {
	t.Helper()
	if len(h.Restarts) > 0 {
		// Nothing is excused: a read or watch event of a write the kill lost fails
		// the checks below (README.md, "Writes are visible before they are durable").
		t.Logf("revisions lost in the kills, (low, high): %v", lostWindows(h))
	}
	rep := check(t, h)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	// The run must have exercised what it claims to check.
	var txnOK, txnFail, unknown int
	for i := range h.Ops {
		o := &h.Ops[i]
		switch {
		case o.unknown():
			unknown++
		case o.Kind == opTxn && o.Succeeded:
			txnOK++
		case o.Kind == opTxn:
			txnFail++
		}
	}
	// Each restart must have been tested: reads after it, against writes from before it.
	for _, rs := range h.Restarts {
		var before, after int64
		for i := range h.Ops {
			o := &h.Ops[i]
			if o.unknown() {
				continue
			}
			if o.Return < rs.At && o.tookRev() {
				before = max(before, o.Rev)
			}
			if o.Call > rs.At+rs.Took && (o.Kind == opGet || o.Kind == opRange) && (after == 0 || o.Rev < after) {
				after = o.Rev
			}
		}
		t.Logf("restart at %.3fs (serving again after %v): last acknowledged write before it rev %d, first read after it rev %d",
			float64(rs.At)/1e9, time.Duration(rs.Took), before, after)
		if before == 0 || after == 0 {
			t.Errorf("restart at %.3fs: no write before it or no read after it", float64(rs.At)/1e9)
		}
	}
	if txnOK == 0 || txnFail == 0 || len(h.Final) == 0 {
		t.Errorf("the load did not exercise both txn outcomes and watches: %d succeeded, %d failed, %d events", txnOK, txnFail, len(h.Final))
	}
}

// TestStoreLinearizable: 8 clients against the store, SIGKILL-restarted during the
// load; the test prefix is fsync, so nothing acknowledged may vanish.
func TestStoreLinearizable(t *testing.T) {
	if _, err := storeproc.FindBin(); err != nil {
		t.Fatalf("%v (run `make store`)", err)
	}
	cfg := loadConfig{Clients: envInt("MEGANODE_LIN_CLIENTS", 8), Duration: envDuration("MEGANODE_LIN_DURATION", 3*time.Second),
		Keys: 16, Watchers: 3, Seed: time.Now().UnixNano()}
	restarts := envInt("MEGANODE_LIN_RESTARTS", 2)
	var at []time.Duration
	for i := 1; i <= restarts; i++ {
		at = append(at, cfg.Duration*time.Duration(i)/time.Duration(restarts+1))
	}
	t.Logf("%d clients, %v, %d restarts at %v, seed %d", cfg.Clients, cfg.Duration, restarts, at, cfg.Seed)
	h := runLoad(t, startStore(t), cfg, at)
	requireClean(t, h)
}

// TestEtcdLinearizable validates the model and the checks: real etcd's histories pass.
func TestEtcdLinearizable(t *testing.T) {
	s, err := etcdref.Start(etcdref.Options{DataDir: t.TempDir(), LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := loadConfig{Clients: 8, Duration: 2 * time.Second, Keys: 16, Watchers: 3, Seed: time.Now().UnixNano()}
	requireClean(t, runLoad(t, &etcdCluster{s}, cfg, nil))
}

// TestPlantedStaleReadsAreCaught: the same load against the real store, but the
// clients answer a fifth of their gets from an earlier response. The checker must say no.
func TestPlantedStaleReadsAreCaught(t *testing.T) {
	if _, err := storeproc.FindBin(); err != nil {
		t.Fatalf("%v (run `make store`)", err)
	}
	cfg := loadConfig{Clients: 4, Duration: time.Second, Keys: 4, Watchers: 1, Seed: time.Now().UnixNano(), StaleReads: 0.2}
	h := runLoad(t, startStore(t), cfg, nil)
	rep := check(t, h)
	if len(rep.Violations) == 0 {
		t.Fatal("the checker accepted a history with planted stale reads")
	}
	caught := map[string]bool{}
	for _, v := range rep.Violations {
		for _, c := range []string{"linearizable", "read-revision"} {
			if len(v) > len(c) && v[:len(c)] == c {
				caught[c] = true
			}
		}
	}
	if !caught["linearizable"] || !caught["read-revision"] {
		t.Errorf("planted stale reads: want porcupine and the header check to object, got:\n%v", rep.Violations)
	}
	t.Logf("planted stale reads reported, e.g.: %s", rep.Violations[0])
}
