package main

// The command tree: every command documented, --help exits 0, usage errors and failed runs
// are one line on stderr with exit 2 and 1, completion scripts, and command lines — ours in
// tests, the Makefile's, internal/'s and deploy/'s — parse into the option fields they mean
// (a dry run: flags parsed and validated, nothing run).

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/meganode/meganode/deploy/manifesttest"
	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/scheduler/collector"
)

// execute runs one command line in process and returns its exit code and output.
func execute(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// dryRun parses and validates args and returns the command and its flag struct; it fails the
// test if the command line does not parse or would have run.
func dryRun(t *testing.T, args ...string) (*cobra.Command, any) {
	t.Helper()
	var gotCmd *cobra.Command
	var got any
	ctx := withDryRun(context.Background(), func(cmd *cobra.Command, opts any) { gotCmd, got = cmd, opts })
	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != exitOK {
		t.Fatalf("meganode %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	if got == nil {
		t.Fatalf("meganode %s: parsed, but reached no command that runs (help printed?):\n%s", strings.Join(args, " "), out.String())
	}
	return gotCmd, got
}

// commands lists every command of the tree but cobra's own (completion and its shells).
func commands() []*cobra.Command {
	var all []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "completion" {
			return
		}
		all = append(all, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := newRootCmd(io.Discard, io.Discard)
	root.InitDefaultHelpCmd() // as Execute does
	walk(root)
	return all
}

func pathArgs(c *cobra.Command) []string {
	return strings.Fields(c.CommandPath())[1:]
}

func oneLine(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: want exactly one line on stderr, got %q", what, stderr)
	}
	if strings.Contains(stderr, "Usage:") || strings.Contains(stderr, "Flags:") {
		t.Errorf("%s: usage dumped on stderr: %q", what, stderr)
	}
}

func TestEveryCommandIsDocumented(t *testing.T) {
	cmds := commands()
	if len(cmds) < 20 {
		t.Fatalf("only %d commands in the tree", len(cmds))
	}
	for _, c := range cmds {
		p := c.CommandPath()
		if c.Short == "" || strings.Contains(c.Short, "\n") {
			t.Errorf("%s: Short must be one non-empty line, got %q", p, c.Short)
		}
		if len(strings.TrimSpace(c.Long)) < 40 {
			t.Errorf("%s: no Long description", p)
		}
		if !strings.Contains(c.Example, "meganode ") {
			t.Errorf("%s: no Example block", p)
		}
		for _, l := range strings.Split(c.Example, "\n") {
			if !strings.HasPrefix(l, "  ") {
				t.Errorf("%s: example line %q is not indented like the others", p, l)
			}
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, c := range commands() {
		args := pathArgs(c)
		for _, form := range [][]string{append(append([]string{}, args...), "--help"), append([]string{"help"}, args...)} {
			code, out, errOut := execute(t, form...)
			what := "meganode " + strings.Join(form, " ")
			if code != exitOK || errOut != "" {
				t.Errorf("%s: exit %d, stderr %q", what, code, errOut)
			}
			firstLong, _, _ := strings.Cut(c.Long, "\n")
			if !strings.Contains(out, "Usage:") || !strings.Contains(out, "Examples:") || !strings.Contains(out, firstLong) {
				t.Errorf("%s: help without usage, examples or the description:\n%s", what, out)
			}
		}
	}
}

func TestUsageErrorsAreOneLineAndExit2(t *testing.T) {
	cases := [][]string{
		{"bogus"},
		{"help", "bogus"},
		{"completion", "tcsh"},
		{"up", "--nodes", "many"},
		{"up", "--kubelets", "many"},
		{"up", "--kubelets", "-1"},
		{"up", "--kubelets", "100001"},
		{"up", "--kubelet-probes", "sometimes"},
		{"up", "--store", "zookeeper"},
		{"up", "--scheduler", "volcano"},
		{"up", "stray"},
		{"up", "-nodes", "10"}, // Go flag's single-dash long form is gone with pflag
		{"demo", "--store-only", "--target", "zookeeper"},
		{"demo", "--store", "etcd"}, // the comparison picks both stacks itself
		{"demo", "--keep"},          // … and stops each before the next
		{"demo", "--compare=false", "--drain-pods", "-1"},
		{"bench", "put", "--target", "x"},
		{"bench", "put", "--clients", "0"},
		{"bench", "put", "--store-replicas", "0"},
		{"bench", "put", "--target", "meganode", "--store-replicas", "3", "--endpoints", "127.0.0.1:2379"},
		{"bench", "report"},
		{"bench", "migrate", "--nodes", "0"},
		{"bench", "migrate", "--nodes", "100", "--pods", "-1"},
		{"bench", "migrate", "--nodes", "100", "--etcd-leases", "101"},
		{"bench", "migrate", "--nodes", "100", "--leases", "10", "--etcd-leases", "20"},
		{"bench", "migrate", "--page-limit", "0"},
		{"bench", "heartbeat", "--store", "zookeeper"},
		{"bench", "heartbeat", "--rates", "100,fast"},
		{"bench", "heartbeat", "--rates", "0"},
		{"bench", "heartbeat", "--leases", "100", "--rates", "50,200"},
		{"bench", "heartbeat", "--step", "0s"},
		{"bench", "heartbeat", "--conns", "0"},
		{"scheduler", "--scatter", "0"},
		{"scheduler", "bench", "--shards", "two"},
		{"scheduler", "simulate", "--binds", "maybe"},
		{"scheduler", "million", "--workload", "skewed"},
		{"scheduler", "million", "--nodes", "0"},
		{"scheduler", "million", "--nodes", "1", "--pods", "1000"},
		{"scheduler", "million", "--max-rss", "lots"},
		{"scheduler", "million", "--rank-sample", "-2"},
		{"doctor", "plan", "--format", "xml"},
		{"doctor", "plan", "--nodes", "10", "--store-replicas", "0"},
		{"doctor", "plan", "--nodes", "10", "--node-agent", "containerd"},
		{"doctor", "plan", "--nodes", "10", "--node-agent", "kwok", "--nodes-json", "r.json"},
		{"bench", "nodes", "--kind", "kubemark", "--out", "/tmp/n"},
		{"bench", "nodes", "--nodes", "0", "--out", "/tmp/n"},
		{"bench", "nodes", "--nodes", "-5", "--out", "/tmp/n"},
		{"bench", "nodes", "--nodes", "100001", "--out", "/tmp/n"},
		{"bench", "nodes", "--nodes", "many", "--out", "/tmp/n"},
		{"bench", "nodes", "--pods-per-node", "0", "--out", "/tmp/n"},
		{"bench", "nodes", "--store", "zookeeper", "--out", "/tmp/n"},
		{"bench", "nodes", "--window", "0s", "--out", "/tmp/n"},
		{"bench", "nodes"}, // --out is required
		{"doctor", "host", "--role", "toaster"},
		{"etcd-proxy"},
		{"etcd-proxy", "replay", "--in", "x"},
		{"store", "import", "--from", "x"},
		{"migrate"},
		{"migrate", "--to", "zookeeper"},
		{"store", "export", "--endpoints", "http://127.0.0.1:1,http://127.0.0.1:2", "--out", "x"},
	}
	// Every command: an unknown flag; every command with subcommands: an unknown one.
	for _, c := range commands() {
		cases = append(cases, append(pathArgs(c), "--no-such-flag"))
		if c.HasSubCommands() {
			cases = append(cases, append(pathArgs(c), "no-such-command"))
		}
	}
	for _, args := range cases {
		code, out, errOut := execute(t, args...)
		what := "meganode " + strings.Join(args, " ")
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d (stderr %q)", what, code, exitUsage, errOut)
		}
		if out != "" {
			t.Errorf("%s: stdout %q, want nothing", what, out)
		}
		oneLine(t, what, errOut)
		if !strings.HasPrefix(errOut, "meganode") || !strings.Contains(errOut, "--help')") {
			t.Errorf("%s: the line should name the command and its help: %q", what, errOut)
		}
	}
}

func TestFailedRunIsOneLineAndExit1(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"create-pods", "--state-dir", filepath.Join(dir, "none")},
		{"migrate", "--to", "store", "--state-dir", filepath.Join(dir, "none")},
		{"doctor", "plan", "--nodes", "1000", "--bench-json", filepath.Join(dir, "missing.json")},
		{"doctor", "plan", "--nodes", "1000", "--nodes-json", filepath.Join(dir, "missing.json")},
		{"bench", "nodes", "--out", dir, "--include", filepath.Join(dir, "missing.json")},
		{"store", "import", "--from", filepath.Join(dir, "missing.db"), "--out", filepath.Join(dir, "out.snap")},
	} {
		code, _, errOut := execute(t, args...)
		what := "meganode " + strings.Join(args, " ")
		if code != exitFailed {
			t.Errorf("%s: exit %d, want %d (stderr %q)", what, code, exitFailed, errOut)
		}
		oneLine(t, what, errOut)
		if strings.Contains(errOut, "--help") {
			t.Errorf("%s: a failed run is not a usage error: %q", what, errOut)
		}
	}
}

func TestCompletion(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "__start_meganode", "zsh": "#compdef meganode", "fish": "complete -c meganode"} {
		code, out, errOut := execute(t, "completion", shell)
		if code != exitOK || errOut != "" || !strings.Contains(out, marker) || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes, marker %q found: %v", shell, code, errOut, len(out), marker, strings.Contains(out, marker))
		}
	}
	// What the shell scripts ask: subcommands, flags, and the values of enumerated flags.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "sch"}, []string{"scheduler"}},
		{[]string{"__complete", "scheduler", ""}, []string{"bench", "simulate"}},
		{[]string{"__complete", "up", "--sto"}, []string{"--store", "--store-arg", "--store-replicas", "--store-shards"}},
		{[]string{"__complete", "up", "--store", ""}, []string{"meganode", "etcd"}},
		{[]string{"__complete", "bench", "put", "--target", ""}, []string{"both", "meganode", "etcd"}},
	} {
		code, out, _ := execute(t, c.args...)
		for _, w := range c.want {
			if code != exitOK || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(w)+`(\t|$)`).MatchString(out) {
				t.Errorf("meganode %s: exit %d, %q not offered:\n%s", strings.Join(c.args, " "), code, w, out)
			}
		}
	}
	// The hidden etcd command is not offered.
	if _, out, _ := execute(t, "__complete", "etc"); strings.Contains(out, "etcd\t") || regexp.MustCompile(`(?m)^etcd$`).MatchString(out) {
		t.Errorf("hidden etcd offered: %q", out)
	}
}

func TestFlagsLandInOptions(t *testing.T) {
	_, o := dryRun(t, "up", "--nodes", "10", "--scheduler", "meganode", "--shards", "3", "--store-arg=--durability=fsync",
		"--store-arg", "--x=a,b", "--scheduler-arg=--scheduler-name=a,b", "--state-dir", "/tmp/x")
	up := o.(*upFlags).options(nil)
	if up.Nodes != 10 || up.Scheduler != cluster.SchedulerMeganode || up.SchedulerShards != 3 || up.StateDir != "/tmp/x" ||
		up.Store != cluster.StoreMeganode || !reflect.DeepEqual([]string(up.StoreArgs), []string{"--durability=fsync", "--x=a,b"}) ||
		!reflect.DeepEqual([]string(up.SchedulerArgs), []string{"--scheduler-name=a,b"}) {
		t.Errorf("up: %+v", up)
	}
	_, o = dryRun(t, "up", "--nodes", "0", "--kubelets", "5", "--kubelet-probes")
	if up := o.(*upFlags).options(nil); up.Nodes != 0 || up.Kubelets != 5 || !up.KubeletProbes {
		t.Errorf("up --kubelets: %+v", up)
	}

	_, o = dryRun(t, "scheduler", "bench", "--nodes", "5", "--shards", "2", "--no-stock", "--scheduler-arg", "--batch=1")
	sb, err := o.(*schedBenchFlags).options(nil)
	if err != nil || sb.Nodes != 5 || !reflect.DeepEqual(sb.Shards, []int{2}) || sb.Pods != 2000 || !sb.NoStock ||
		!reflect.DeepEqual(sb.SchedulerArg, []string{"--batch=1"}) {
		t.Errorf("scheduler bench: %+v %v", sb, err)
	}

	_, o = dryRun(t, "scheduler", "--role", "shard", "--shards", "4", "--index", "2", "--scatter", "all", "--equivalence-ttl", "0")
	sf := o.(*schedulerFlags)
	cfg, err := sf.config()
	if err != nil || sf.role != "shard" || sf.index != 2 || cfg.Shards != 4 || cfg.Scatter != collector.ScatterAll || cfg.EquivalenceTTL != -1 {
		t.Errorf("scheduler: %+v %+v %v", sf, cfg, err)
	}

	cmd, o := dryRun(t, "demo")
	if d := o.(*demoFlags); d.up.nodes != 1000 || d.up.pods != 1000 || d.storeOnly || !d.compare || d.drainPods != 1000 ||
		d.up.sched.scheduler != "meganode" || cmd.Flags().Lookup("nodes").DefValue != "1000" {
		t.Errorf("demo defaults: %+v", d)
	}
	_, o = dryRun(t, "demo", "--compare=false", "--store", "etcd", "--scheduler", "kube-scheduler", "--keep")
	if d := o.(*demoFlags); d.compare || d.up.store != "etcd" || d.up.sched.scheduler != "kube-scheduler" || !d.keep {
		t.Errorf("demo --compare=false: %+v", d)
	}
	_, o = dryRun(t, "demo", "--store-only", "--target", "etcd", "--duration", "2s")
	if d := o.(*demoFlags); !d.storeOnly || d.target != "etcd" || d.duration.Seconds() != 2 {
		t.Errorf("demo --store-only: %+v", d)
	}

	// Each workload its own defaults (and --help shows them).
	_, o = dryRun(t, "bench", "watch")
	if b := o.(*benchFlags); b.clients != "100" || b.keySpace != 10000 || b.keySize != 16 || b.workload != "watch" || b.totalSet {
		t.Errorf("bench watch defaults: %+v", b)
	}
	_, o = dryRun(t, "bench", "lease-flood", "--clients", "1,16", "--total", "500", "--target", "meganode")
	if b := o.(*benchFlags); !reflect.DeepEqual(b.counts, []int{1, 16}) || b.total != 500 || !b.totalSet || b.durationSet ||
		b.leases != 10000 || !reflect.DeepEqual(b.kinds, []string{"meganode"}) {
		t.Errorf("bench lease-flood: %+v", b)
	}
	if b := o.(*benchFlags); b.replicas != 1 {
		t.Errorf("bench lease-flood: --store-replicas defaults to 1, got %d", b.replicas)
	}
	_, o = dryRun(t, "bench", "put", "--target", "both", "--store-replicas", "3", "--tls")
	if b := o.(*benchFlags); b.replicas != 3 || !b.tls || !reflect.DeepEqual(b.kinds, []string{"meganode", "etcd"}) {
		t.Errorf("bench put --store-replicas 3: %+v", b)
	}

	_, o = dryRun(t, "bench", "state", "--nodes", "2000", "--target", "etcd", "--watch-duration", "5s", "--skip-restart")
	if b := o.(*benchStateFlags); b.nodes != 2000 || b.targets != "etcd" || b.watchDuration.Seconds() != 5 || !b.skipRst || b.skipWatch ||
		b.clients != 64 || b.watchers != 5 || b.pageLimit != 500 || b.etcdQuota != 64<<30 {
		t.Errorf("bench state: %+v", b)
	}
	_, o = dryRun(t, "bench", "migrate")
	if b := o.(*benchMigrateFlags); !reflect.DeepEqual(b.config(), bench.MigrateConfig{Nodes: 1000000, Pods: 1000000, Leases: 1000000, EtcdLeases: 1000,
		Clients: 64, Conns: 8, PageLimit: 5000, DataRoot: "/dev/shm", SnapshotDir: os.TempDir(), StoreArgs: []string{}, EtcdQuota: 64 << 30}) || b.out != "" || b.serverLog {
		t.Errorf("bench migrate defaults: %+v", b.config())
	}
	_, o = dryRun(t, "bench", "migrate", "--nodes", "10000", "--pods", "20000", "--leases", "5000", "--etcd-leases", "50",
		"--page-limit", "100", "--snapshot-dir", "/var/tmp/x", "--store-args", "--durability=fsync --quota-backend-bytes=-1", "--out", "/tmp/m")
	if b := o.(*benchMigrateFlags); b.out != "/tmp/m" {
		t.Errorf("bench migrate --out: %q", b.out)
	} else if c := b.config(); c.Nodes != 10000 || c.Pods != 20000 || c.Leases != 5000 || c.EtcdLeases != 50 || c.PageLimit != 100 ||
		c.SnapshotDir != "/var/tmp/x" || !reflect.DeepEqual(c.StoreArgs, []string{"--durability=fsync", "--quota-backend-bytes=-1"}) {
		t.Errorf("bench migrate: %+v", c)
	}
	_, o = dryRun(t, "bench", "heartbeat")
	if b := o.(*benchHeartbeatFlags); !reflect.DeepEqual(b.stores, []string{"meganode", "etcd"}) || b.leases != 10000 || b.step != time.Minute ||
		b.warmup != 10*time.Second || b.conns != 32 || b.dataDir != "/dev/shm" || len(b.parsedRates) == 0 {
		t.Errorf("bench heartbeat defaults: %+v", b)
	}
	_, o = dryRun(t, "bench", "heartbeat", "--store", "etcd", "--leases", "2000", "--rates", "2000, 500,1000,500", "--step", "20s",
		"--warmup", "0s", "--conns", "4", "--out", "/tmp/hb", "--apiserver-arg=--v=1", "--store-arg=--durability=fsync")
	if b := o.(*benchHeartbeatFlags); !reflect.DeepEqual(b.stores, []string{"etcd"}) || b.leases != 2000 ||
		!reflect.DeepEqual(b.parsedRates, []float64{500, 1000, 2000}) || b.step != 20*time.Second || b.warmup != 0 || b.conns != 4 ||
		b.out != "/tmp/hb" || !reflect.DeepEqual(b.apiserverArgs, []string{"--v=1"}) || !reflect.DeepEqual(b.storeArgs, []string{"--durability=fsync"}) {
		t.Errorf("bench heartbeat: %+v", b)
	}
	_, o = dryRun(t, "migrate", "--to", "store", "--check-pods", "7", "--state-dir", "/tmp/x", "--store-arg=--durability=fsync")
	if m := o.(*migrateFlags).options(nil); m.To != cluster.StoreMeganode || m.CheckPods != 7 || !m.Verify || m.PollInterval != 100*time.Millisecond ||
		m.APIServerGrace != 5*time.Second || m.PageLimit != 5000 || !reflect.DeepEqual(m.StoreArgs, []string{"--durability=fsync"}) || o.(*migrateFlags).stateDir != "/tmp/x" {
		t.Errorf("migrate --to store: %+v", m)
	}
	_, o = dryRun(t, "migrate", "--to", "etcd", "--verify=false")
	if m := o.(*migrateFlags).options(nil); m.To != cluster.StoreEtcd || m.Verify {
		t.Errorf("migrate --to etcd --verify=false: %+v", m)
	}
	_, o = dryRun(t, "doctor", "plan", "--nodes", "1000000", "--json")
	if p := o.(*doctorPlanFlags); p.nodes != 1000000 || p.format != "json" || p.replicas != 1 {
		t.Errorf("doctor plan: %+v", p)
	}
	_, o = dryRun(t, "doctor", "plan", "--nodes", "1000", "--store-replicas", "3")
	if p := o.(*doctorPlanFlags); p.replicas != 3 {
		t.Errorf("doctor plan --store-replicas 3: %+v", p)
	}
	_, o = dryRun(t, "doctor", "plan", "--nodes", "1000")
	if p := o.(*doctorPlanFlags); p.nodeAgent != "kwok" || p.nodesJSON != "" {
		t.Errorf("doctor plan: --node-agent defaults to kwok: %+v", p)
	}
	_, o = dryRun(t, "doctor", "plan", "--nodes", "1000", "--node-agent", "kubelet")
	if p := o.(*doctorPlanFlags); p.nodeAgent != "kubelet" {
		t.Errorf("doctor plan --node-agent kubelet: %+v", p)
	}
	_, o = dryRun(t, "doctor", "plan", "--nodes", "1000", "--nodes-json", "/tmp/nodes/report.json")
	if p := o.(*doctorPlanFlags); p.nodeAgent != "kubelet" || p.nodesJSON != "/tmp/nodes/report.json" {
		t.Errorf("doctor plan --nodes-json implies --node-agent kubelet: %+v", p)
	}
	_, o = dryRun(t, "bench", "nodes", "--out", "/tmp/n")
	if b := o.(*benchNodesFlags); !reflect.DeepEqual(b.kinds, []string{cluster.AgentKubelet, cluster.AgentKWOK}) || b.nodes != 100 || b.ppn != 5 ||
		b.store != cluster.StoreMeganode || b.window != time.Minute || b.qps != 20 || b.out != "/tmp/n" {
		t.Errorf("bench nodes defaults: %+v", b)
	}
	_, o = dryRun(t, "bench", "nodes", "--kind", "kubelet", "--store", "etcd", "--nodes", "200", "--pods-per-node", "3", "--window", "30s",
		"--qps", "0", "--out", "/tmp/n", "--include", "/tmp/a/report.json", "--state-dir", "/var/tmp/bn")
	if b := o.(*benchNodesFlags); !reflect.DeepEqual(b.kinds, []string{cluster.AgentKubelet}) || b.nodes != 200 || b.ppn != 3 || b.store != cluster.StoreEtcd ||
		b.window != 30*time.Second || b.qps != 0 || !reflect.DeepEqual(b.include, []string{"/tmp/a/report.json"}) || b.stateDir != "/var/tmp/bn" {
		t.Errorf("bench nodes: %+v", b)
	}
	_, o = dryRun(t, "bench", "nodes", "--kind", "kwok", "--nodes", "10", "--out", "/tmp/n")
	if b := o.(*benchNodesFlags); !reflect.DeepEqual(b.kinds, []string{cluster.AgentKWOK}) || b.nodes != 10 {
		t.Errorf("bench nodes --kind kwok: %+v", b)
	}
}

// The command lines other code builds: internal/cluster (the meganode scheduler component,
// etcd for --store etcd, the recording proxy), internal/bench (etcd), test/e2e (webhook intake).
func TestInternalInvocationsParse(t *testing.T) {
	for _, args := range [][]string{
		{"scheduler", "--role=all", "--kubeconfig=/k", "--shards=2", "--healthz=127.0.0.1:1", "--scheduler-name=meganode,default-scheduler", "--reconcile-every=2s"},
		{"scheduler", "--role=all", "--kubeconfig=/k", "--intake=webhook", "--webhook-addr=127.0.0.1:2", "--webhook-ca-file=/ca"},
		{"etcd", "--data-dir", "/d", "--listen-client-urls", "http://127.0.0.1:2379"},
		{"etcd", "--data-dir", "/d", "--listen-client-urls", "http://127.0.0.1:2379", "--quota-backend-bytes", "68719476736"}, // bench state
		{"etcd", "--data-dir", "/d", "--listen-client-urls", "http://127.0.0.1:2379", "--name", "m0", "--listen-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2382", "--initial-cluster-token", "meganode-bench"}, // bench --store-replicas
		{"etcd", "--data-dir", "/d", "--listen-client-urls", "http://127.0.0.1:2379", "--name", "store", "--listen-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", "store=http://127.0.0.1:2380"}, // migrate --to etcd: etcd on etcdutl's restore
		{"etcd-proxy", "--listen", "127.0.0.1:1", "--target", "http://127.0.0.1:2", "--record", "/r.jsonl"},
		{"store", "import", "--from", "/etcd.db", "--out", "/tmp/meganode-store-import-1/store.snap"}, // meganode-store --restore-from etcd.db
		{"store", "check-backend", "--file", "/etcd.db"},                                              // store import, in a process of its own
	} {
		dryRun(t, args...)
	}
}

// makeVars reads the Makefile's simple variable assignments (NAME ?= v, NAME := v, NAME = v).
func makeVars(text string) map[string]string {
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)[ \t]*(?:\?=|:=|=)[ \t]*(.*)$`).FindAllStringSubmatch(text, -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	return vars
}

// Every `$(MEGANODE_BIN) …` invocation of the Makefile (demo, demo-store, bench) parses.
func TestMakefileInvocationsParse(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	vars := makeVars(text)
	vars["CURDIR"] = "/repo"
	// BENCH_STATE_NODES=0 skips its step (the shell's if); the command it guards must parse when set.
	if vars["BENCH_STATE_NODES"] == "0" {
		vars["BENCH_STATE_NODES"] = "100000"
	}
	expand := func(s string) string {
		for i := 0; i < 5; i++ {
			s = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(s, func(v string) string { return vars[v[2:len(v)-1]] })
		}
		return regexp.MustCompile(`\$\$\([^)]*\)`).ReplaceAllString(s, "x") // $$(shell command) in a recipe
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)(?:^\t-?|then )\$\(MEGANODE_BIN\) ([^;\n]*)`).FindAllStringSubmatch(text, -1) {
		line := strings.TrimSuffix(strings.TrimSpace(expand(m[1])), " fi")
		args := strings.Fields(line)
		if len(args) == 0 {
			continue
		}
		n++
		t.Logf("meganode %s", line)
		dryRun(t, args...)
	}
	if n < 7 {
		t.Fatalf("found %d meganode invocations in the Makefile, want the demo, demo-store and bench ones (≥ 7)", n)
	}
}

// The meganode scheduler's command lines in deploy/scheduler (a `sh -c` string or an argument
// list) and in the Helm chart rendered with its defaults and with the webhook intake and a relay
// tree (bin/helm, `make helm`). Kubernetes' $(VAR) references (the pod index) stand in as 0.
func TestDeployManifestInvocationsParse(t *testing.T) {
	files, err := filepath.Glob("../../deploy/scheduler/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	n := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n += manifestInvocations(t, file, string(b))
	}
	if n < 4 {
		t.Fatalf("found %d meganode containers in deploy/scheduler, want ≥ 4", n)
	}
	chart := manifesttest.Helm(t, "meganode", "x", false)
	chart = append(chart, manifesttest.Helm(t, "meganode", "x", false, "--set=scheduler.intake=webhook,scheduler.shards=25")...)
	// shard, relay, collector; then shard, 3 leaf relays, the root relay, collector.
	if n = manifestInvocations(t, "helm template", string(chart)); n != 3+6 {
		t.Fatalf("found %d meganode containers in the chart, want 9", n)
	}
}

// manifestInvocations dry-runs the meganode command line of every container of a YAML stream
// (store containers aside) and returns their count.
func manifestInvocations(t *testing.T, file, stream string) int {
	t.Helper()
	n := 0
	for _, doc := range regexp.MustCompile(`(?m)^---`).Split(stream, -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, c := range containers(obj) {
			if img, _ := c["image"].(string); strings.Contains(img, "/meganode-store:") {
				continue
			}
			var line []string
			for _, key := range []string{"command", "args"} {
				for _, a := range asStrings(c[key]) {
					line = append(line, a)
				}
			}
			if len(line) == 0 {
				continue
			}
			var args []string
			if line[0] == "/bin/sh" && len(line) == 3 {
				f := strings.Fields(regexp.MustCompile(`\$\{[^}]*\}`).ReplaceAllString(line[2], "0"))
				if len(f) < 2 || f[0] != "exec" || f[1] != "meganode" {
					t.Fatalf("%s: unexpected shell line %q", file, line[2])
				}
				args = f[2:]
			} else {
				for _, a := range line {
					args = append(args, regexp.MustCompile(`\$\([A-Z_]+\)`).ReplaceAllString(a, "0"))
				}
			}
			n++
			dryRun(t, args...)
		}
	}
	return n
}

// containers finds the container specs (maps with an image) anywhere in a decoded manifest.
func containers(v any) []map[string]any {
	var out []map[string]any
	switch x := v.(type) {
	case map[string]any:
		if img, ok := x["image"].(string); ok && strings.Contains(img, "meganode") {
			out = append(out, x)
		}
		for _, e := range x {
			out = append(out, containers(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, containers(e)...)
		}
	}
	return out
}

func asStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// --version prints the version make links in (-X main.version; "dev" in tests).
func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != 0 || out.String() != "meganode version "+version+"\n" {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errOut.String())
	}
}
