package bench

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/testcerts"
)

func TestTargetName(t *testing.T) {
	for _, c := range []struct {
		kind    string
		members int
		want    string
	}{
		{TargetMeganode, 0, "meganode"},
		{TargetMeganode, 1, "meganode"},
		{TargetEtcd, 1, "etcd"},
		{TargetMeganode, 3, "meganode (3 members)"},
		{TargetEtcd, 5, "etcd (5 members)"},
	} {
		got := TargetName(c.kind, c.members)
		if got != c.want {
			t.Errorf("TargetName(%s, %d) = %q, want %q", c.kind, c.members, got, c.want)
		}
		k, n := targetKind(got)
		if k != c.kind || n != max(c.members, 1) {
			t.Errorf("targetKind(%q) = %s, %d", got, k, n)
		}
	}
	// Other names (catch-up's leader, soak's) are their own kind.
	if k, n := targetKind("meganode (leader)"); k != "meganode (leader)" || n != 1 {
		t.Errorf("targetKind(meganode (leader)) = %s, %d", k, n)
	}
	// One server first, then groups by size; meganode before etcd.
	if !(targetOrder("etcd") < targetOrder("meganode (3 members)") && targetOrder("meganode (3 members)") < targetOrder("etcd (3 members)") &&
		targetOrder("meganode") < targetOrder("etcd")) {
		t.Errorf("target order: %s %s %s %s", targetOrder("meganode"), targetOrder("etcd"), targetOrder("meganode (3 members)"), targetOrder("etcd (3 members)"))
	}
	if targetColor("etcd (3 members)") != colEtcd || targetColor("meganode (3 members)") != colMeganode {
		t.Error("a group is drawn in its kind's colour")
	}
}

// TestSumUsage: a group's CPU and memory are its members' summed, each member kept,
// the largest member's peak beside the sum; a member not measured makes the sum unmeasured.
func TestSumUsage(t *testing.T) {
	us := []ProcUsage{
		{Measured: true, CPUMicros: 3000, UserUs: 2000, SystemUs: 1000, RSSBytes: 100 << 20, PeakRSS: 120 << 20},
		{Measured: true, CPUMicros: 1000, UserUs: 600, SystemUs: 400, RSSBytes: 90 << 20, PeakRSS: 95 << 20},
		{Measured: true, CPUMicros: 1500, UserUs: 1000, SystemUs: 500, RSSBytes: 80 << 20, PeakRSS: 85 << 20},
	}
	got := SumUsage([]int{11, 12, 13}, us)
	if !got.Measured || got.CPUMicros != 5500 || got.UserUs != 3600 || got.SystemUs != 1900 ||
		got.RSSBytes != 270<<20 || got.PeakRSS != 300<<20 || got.MaxMemberPeakRSS != 120<<20 {
		t.Fatalf("sum: %+v", got)
	}
	if len(got.Members) != 3 || got.Members[1] != (MemberUsage{Pid: 12, CPUMicros: 1000, RSSBytes: 90 << 20, PeakRSS: 95 << 20}) {
		t.Fatalf("members: %+v", got.Members)
	}
	us[2].Measured = false
	if got := SumUsage([]int{11, 12, 13}, us); got.Measured || got.CPUMicros != 0 || len(got.Members) != 3 {
		t.Fatalf("a member not measured: %+v", got)
	}
	if got := SumUsage(nil, nil); got.Measured {
		t.Fatalf("no members: %+v", got)
	}
}

// TestServerWatchSumsProcesses: the watch over two real processes reads both; over one, it
// is that process's ProcWatch (no members listed: one server's output is unchanged).
func TestServerWatchSumsProcesses(t *testing.T) {
	burn := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30")
	if err := burn.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer func() { _ = burn.Process.Kill(); _ = burn.Wait() }()
	pids := []int{os.Getpid(), burn.Process.Pid}
	w := StartServerWatch(pids)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := ReadProc(burn.Process.Pid); err == nil && s.CPUMicros() > w.ws[1].start.CPUMicros() {
			break
		}
		w.Poll()
		time.Sleep(20 * time.Millisecond)
	}
	u := w.Stop()
	if !u.Measured || len(u.Members) != 2 || u.Members[1].Pid != burn.Process.Pid || u.Members[1].CPUMicros <= 0 {
		t.Fatalf("two processes: %+v", u)
	}
	if u.CPUMicros != u.Members[0].CPUMicros+u.Members[1].CPUMicros || u.PeakRSS != u.Members[0].PeakRSS+u.Members[1].PeakRSS ||
		u.MaxMemberPeakRSS != max(u.Members[0].PeakRSS, u.Members[1].PeakRSS) {
		t.Fatalf("not the members' sum: %+v", u)
	}
	one := StartServerWatch([]int{os.Getpid()}).Stop()
	if !one.Measured || one.Members != nil || one.MaxMemberPeakRSS != 0 {
		t.Fatalf("one process: %+v", one)
	}
	if none := StartServerWatch(nil).Stop(); none.Measured {
		t.Fatalf("no process: %+v", none)
	}
}

// TestGroupResultsLabelled: groups are named "meganode (3 members)", compared with an etcd
// group of the same size only, and left out of issue 4's one-server goals; one server's
// table is as before.
func TestGroupResultsLabelled(t *testing.T) {
	run := func(target string, members int, ops, cpu float64, peak, maxPeak uint64) *Result {
		r := &Result{Workload: "put", Target: target, Members: members, Clients: 100, Round: 1, OpsPerSec: ops,
			ServerCPUPerOpUs: cpu, Server: ProcUsage{Measured: true, PeakRSS: peak, MaxMemberPeakRSS: maxPeak},
			Latency: Latency{P50Us: 1000, P99Us: 5000}}
		return r
	}
	rep := &Report{Runs: []*Result{
		run("meganode", 0, 40000, 20, 100<<20, 0),
		run("etcd", 0, 10000, 200, 200<<20, 0),
		run("meganode (3 members)", 3, 20000, 60, 300<<20, 110<<20),
		run("etcd (3 members)", 3, 5000, 600, 600<<20, 210<<20),
	}}
	sums := Summarize(rep.Runs)
	var order []string
	for _, s := range sums {
		order = append(order, s.Target)
	}
	if strings.Join(order, ",") != "meganode,etcd,meganode (3 members),etcd (3 members)" {
		t.Fatalf("order: %v", order)
	}
	if sums[2].Members != 3 || sums[2].MaxMemberPeakRSSBytes != 110<<20 || sums[0].Members != 0 || sums[0].MaxMemberPeakRSSBytes != 0 {
		t.Fatalf("summaries: %+v %+v", sums[0], sums[2])
	}
	cmp := Compare(sums)
	if len(cmp) != 2 || cmp[0].Members != 1 || cmp[1].Members != 3 || cmp[1].Etcd.Target != "etcd (3 members)" ||
		cmp[1].CPUX() != 0.1 || cmp[1].ThroughputX() != 4 {
		t.Fatalf("comparisons: %+v", cmp)
	}
	var b strings.Builder
	WriteTable(&b, rep)
	out := b.String()
	for _, want := range []string{"meganode (3 members)", "etcd (3 members)", "put [3 members each]",
		"put etcd (3 members) c=100: srv µs/op and peak RSS are summed over the 3 members' processes; the largest member's peak RSS 210 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary without %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "put meganode c=100: srv") {
		t.Errorf("one server's summary changed:\n%s", out)
	}
	for _, g := range Goals(rep) {
		if strings.HasPrefix(g.What, "put, buffered: throughput") && g.Measured != "4.00× (100 clients)" {
			t.Errorf("goal from one server's runs: %+v", g)
		}
	}
}

func TestGroupTargetRefusesKillRestartAndEndpoints(t *testing.T) {
	tg := &Target{Name: "meganode (3 members)", Members: 3, crash: groupCrash("meganode (3 members)")}
	if err := tg.KillRestart(); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("KillRestart on a group: %v", err)
	}
	if _, err := (TargetSpec{Kind: TargetMeganode, Members: 3, Endpoints: []string{"127.0.0.1:1"}}).Start(); err == nil {
		t.Error("a group given as endpoints was accepted")
	}
}

// TestGroupTargets: a 3-member meganode-store group and a 3-member etcd cluster start, every
// member serving the same certificates (bench --tls), the load's clients get every member,
// and put runs against each with the CPU summed over the three processes. A few seconds each.
func TestGroupTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 meganode-store and 3 etcd processes")
	}
	storeBin, meganode := serverBins(t)
	certs, err := testcerts.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{TargetMeganode, TargetEtcd} {
		t.Run(kind, func(t *testing.T) {
			spec := TargetSpec{Kind: kind, Members: 3, StoreBin: storeBin, EtcdCmd: []string{meganode, "etcd"}, TLS: &certs,
				StoreDataRoot: t.TempDir(), EtcdDataRoot: t.TempDir()}
			tg, err := spec.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			if tg.Name != kind+" (3 members)" || len(tg.Endpoints) != 3 || len(tg.Pids) != 3 || tg.Pid != 0 {
				t.Fatalf("target: %+v", tg)
			}
			if err := tg.KillRestart(); err == nil {
				t.Error("KillRestart on a group was not refused")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Config{Clients: 8, Conns: 3, Duration: time.Second, KeySize: 16, ValSize: 64, KeySpaceSize: 100}
			res, err := Execute(ctx, NewPut(cfg), tg, cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Target != kind+" (3 members)" || res.Members != 3 || res.Ops == 0 || res.Errors != 0 {
				t.Fatalf("result: %+v", res)
			}
			var sum float64
			for _, m := range res.Server.Members {
				if m.CPUMicros <= 0 { // followers apply every put too
					t.Errorf("member %d used no CPU: %+v", m.Pid, res.Server.Members)
				}
				sum += m.CPUMicros
			}
			if !res.Server.Measured || len(res.Server.Members) != 3 || sum != res.Server.CPUMicros || res.ServerCPUPerOpUs <= 0 ||
				res.Server.MaxMemberPeakRSS == 0 || res.Server.PeakRSS < 3*res.Server.MaxMemberPeakRSS/2 {
				t.Fatalf("server usage: %+v", res.Server)
			}
			// Every member has the writes (the group replicated them).
			for _, ep := range tg.Endpoints {
				cs, err := ConnectTLS(ctx, []string{ep}, 1, tg.TLS)
				if err != nil {
					t.Fatal(err)
				}
				g, err := cs[0].Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
				CloseAll(cs)
				if err != nil || g.Count == 0 {
					t.Errorf("member %s: %v keys, %v", ep, g, err)
				}
			}
		})
	}
}
