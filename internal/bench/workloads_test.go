package bench

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/etcdref"
)

// Smoke tests: each workload runs a second against embedded etcd (in this test
// process, so the "server" CPU is the test's own). Nothing here asserts speed.

var refEtcd *etcdref.Server

func TestMain(m *testing.M) {
	code := m.Run()
	if refEtcd != nil {
		refEtcd.Close()
	}
	os.Exit(code)
}

func etcdTarget(t *testing.T) *Target {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd")
	}
	if refEtcd == nil {
		dir := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			d, err := os.MkdirTemp("/dev/shm", "bench-test-etcd-")
			if err != nil {
				t.Fatal(err)
			}
			dir = d
		}
		s, err := etcdref.Start(etcdref.Options{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		refEtcd = s
	}
	return &Target{Name: TargetEtcd, Endpoints: []string{refEtcd.Endpoint}, Pid: os.Getpid()}
}

func smoke(t *testing.T, name string, cfg Config) *Result {
	t.Helper()
	tg := etcdTarget(t)
	if cfg.Duration == 0 && cfg.Total == 0 {
		cfg.Duration = time.Second
	}
	wl, err := New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Execute(ctx, wl, tg, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.Errors != 0 || res.OpsPerSec <= 0 || res.Latency.P50Us <= 0 ||
		res.Latency.P99Us < res.Latency.P50Us || res.Latency.MaxUs < res.Latency.P999Us {
		t.Fatalf("implausible result: %+v", res)
	}
	if !res.Server.Measured || res.ServerCPUPerOpUs <= 0 {
		t.Fatalf("server not measured: %+v", res.Server)
	}
	return res
}

func TestSmokePut(t *testing.T) {
	smoke(t, "put", Config{Clients: 8, Conns: 2, KeySize: 48, ValSize: 256, KeySpaceSize: 1000})
	res := smoke(t, "put", Config{Clients: 4, Conns: 4, Total: 500, KeySize: 8, ValSize: 8, SequentialKeys: true})
	if res.Ops != 500 {
		t.Fatalf("--total 500 ran %d ops", res.Ops)
	}
}

func TestSmokeLeaseFlood(t *testing.T) {
	res := smoke(t, "lease-flood", Config{Clients: 8, Conns: 2, Leases: 80})
	if res.Extra["conflicts"] != 0 {
		t.Fatalf("each client owns its leases: no conflicts expected, got %v", res.Extra["conflicts"])
	}
	// The renewed values are real Leases.
	cs, err := Connect(context.Background(), []string{refEtcd.Endpoint}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(cs)
	g, err := cs[0].Get(context.Background(), LeasePrefix+NodeName(3))
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("get lease: %v", err)
	}
	l, err := DecodeLease(g.Kvs[0].Value)
	if err != nil || l.Name != NodeName(3) || time.Since(l.Spec.RenewTime.Time) > time.Minute {
		t.Fatalf("stored lease: %v %+v", err, l)
	}
	if g.Kvs[0].Version < 2 {
		t.Fatalf("lease was not renewed: version %d", g.Kvs[0].Version)
	}
}

func TestSmokeWatch(t *testing.T) {
	res := smoke(t, "watch", Config{Clients: 4, Conns: 2, Watchers: 3, ValSize: 100, KeySpaceSize: 100, KeySize: 16})
	if res.Extra["events"] != float64(res.Ops*3) || res.Extra["events_missing"] != 0 {
		t.Fatalf("events %v for %d writes to 3 watchers", res.Extra["events"], res.Ops)
	}
	if res.Extra["delay_p50_us"] <= 0 || res.Extra["events_per_sec"] <= 0 {
		t.Fatalf("no delay measured: %v", res.Extra)
	}
}

func TestSmokeRange(t *testing.T) {
	res := smoke(t, "range", Config{Clients: 2, Conns: 2, Keys: 1200, PageLimit: 500, KeySize: 24, ValSize: 64})
	if res.Extra["lists_latest"] < 1 || res.Extra["lists_old"] < 1 || res.Extra["wrong_lists"] != 0 {
		t.Fatalf("lists: %v", res.Extra)
	}
}

// The floor workloads run against real etcd with no errors; get-missing finds nothing.
func TestSmokeFloor(t *testing.T) {
	smoke(t, "get-missing", Config{Clients: 8, Conns: 2, KeySize: 48, KeySpaceSize: 1000})
	smoke(t, "status", Config{Clients: 8, Conns: 2})
	cs, err := Connect(context.Background(), []string{refEtcd.Endpoint}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(cs)
	g, err := cs[0].Get(context.Background(), "/missing/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 0 {
		t.Fatalf("get-missing wrote keys? count %d, %v", g.Count, err)
	}
}

func TestReportOutputs(t *testing.T) {
	// Synthetic sweep results: the report, charts and markdown are built from them.
	var runs []*Result
	for _, c := range []int{1, 16, 100, 1000} {
		for round := 1; round <= 3; round++ {
			for _, tg := range []string{TargetMeganode, TargetEtcd} {
				f := 1.0
				if tg == TargetMeganode {
					f = 3
				}
				runs = append(runs, &Result{Workload: "put", Target: tg, Round: round, Clients: c, Conns: 10,
					Ops: int64(1000 * c), OpsPerSec: f * float64(1000*c) / float64(round),
					Latency:          Latency{P50Us: 100 * float64(c) / f, P99Us: 400 * float64(c) / f / f, MaxUs: 1e4},
					ServerCPUPerOpUs: 50 / f / f, Server: ProcUsage{Measured: true, PeakRSS: 100 << 20}})
			}
		}
	}
	runs = append(runs, &Result{Workload: "watch", Target: TargetEtcd, Clients: 10, OpsPerSec: 5000,
		Params: map[string]any{"watchers": 10}, Extra: map[string]float64{"events_per_sec": 50000, "delay_p99_us": 900, "delay_p50_us": 300}})
	rep := &Report{Meta: NewMeta([]string{"meganode", "bench", "put"}), Runs: runs}

	sums := Summarize(rep.Runs)
	if len(sums) != 9 || sums[0].Target != TargetMeganode || sums[0].Clients != 1 || sums[0].Rounds != 3 {
		t.Fatalf("summaries: %d, first %+v", len(sums), sums[0])
	}
	if sums[0].OpsPerSec != 1500 { // median of 3000, 1500, 1000
		t.Fatalf("median ops/s %v", sums[0].OpsPerSec)
	}
	cmp := Compare(sums)
	if len(cmp) != 4 || cmp[0].ThroughputX() != 3 || cmp[0].CPUX() > 0.112 || cmp[0].CPUX() < 0.110 {
		t.Fatalf("comparisons: %+v", cmp)
	}
	goals := Goals(rep)
	if goals[0].Met != "yes" || goals[1].Met != "yes" || goals[2].Met != "not measured" || goals[6].Met != "yes" || goals[7].Met != "not measured" {
		t.Fatalf("goals: %+v", goals)
	}
	mem := Merge(rep, &Report{Memory: &MemoryResult{Keys: 1000000, Updates: 10, MeganodeRSS: 100, EtcdRSS: 150, EtcdDB: 100}})
	if g := Goals(mem)[7]; g.Met != "yes" || !strings.Contains(g.Measured, "0.40×") {
		t.Fatalf("memory goal: %+v", g)
	}
	mem.Memory.MeganodeRSS = 200
	if g := Goals(mem)[7]; g.Met != "no" {
		t.Fatalf("memory goal over the limit: %+v", g)
	}

	dir := t.TempDir()
	if err := WriteOutputs(dir, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(dir)
	if err != nil || len(back.Runs) != len(runs) {
		t.Fatalf("read back: %v", err)
	}
	for _, f := range []string{"put-throughput.png", "put-latency.png", "put-cpu.png", "watch-events.png", "report.html", "summary.txt"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".png") {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !bytes.Contains(html, []byte("<svg")) || bytes.Contains(html, []byte("<img")) {
		t.Fatal("the HTML page must carry its charts inline")
	}
	var md bytes.Buffer
	WriteMarkdown(&md, back, Charts(back), "bench/")
	for _, want := range []string{"## Goals", "| put, buffered: throughput vs etcd (tmpfs) | ≥ 2× | 3.00× (1000 clients) | yes |",
		"![put: throughput vs clients](bench/put-throughput.png)", "## watch"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}
