package doctor

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestAPIServerCount(t *testing.T) {
	for _, c := range []struct{ nodes, want int }{
		{1, 3}, {200, 3}, {201, 5}, {1000, 5}, {1001, 7}, {2500, 7}, {2501, 9}, {4000, 9}, {4001, 11}, {5000, 11},
		{5001, 11}, {100_000, 11}, {1_000_000, 11}, {1_000_001, 12}, {2_000_000, 22},
	} {
		if got := APIServerCount(c.nodes); got != c.want {
			t.Errorf("APIServerCount(%d) = %d, want %d", c.nodes, got, c.want)
		}
	}
}

func TestMaxPodsGuideline(t *testing.T) {
	for _, c := range []struct{ cores, want int }{{0, 110}, {1, 10}, {2, 20}, {8, 80}, {11, 110}, {16, 110}, {64, 110}} {
		if got := MaxPodsGuideline(c.cores); got != c.want {
			t.Errorf("MaxPodsGuideline(%d) = %d, want %d", c.cores, got, c.want)
		}
	}
}

func TestRelayTree(t *testing.T) {
	for _, c := range []struct {
		shards int
		want   []int
	}{
		{1, nil}, {2, []int{1}}, {10, []int{1}}, {11, []int{2}}, {100, []int{10}}, {101, []int{11, 2}},
		{256, []int{26, 3}}, {299, []int{30, 3}}, {10_000, []int{1000, 100, 10}},
	} {
		got := RelayTree(c.shards, SchedulerFanout)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("RelayTree(%d) = %v, want %v", c.shards, got, c.want)
		}
	}
	sum := 0
	for _, l := range RelayTree(256, 10) {
		sum += l
	}
	if sum != 29 {
		t.Errorf("relays for 256 shards = %d, want 29 (the reference)", sum)
	}
}

func TestPlanMillion(t *testing.T) {
	p := Plan(PlanInput{Nodes: 1_000_000, Pods: 1_000_000, CoresPerNode: 32})
	s := p.Store
	if s.LeaseWritesPerSec != 100_000 {
		t.Errorf("lease writes = %v, want 100000 (1M / 10 s)", s.LeaseWritesPerSec)
	}
	if s.LeasesFit != "no" {
		t.Errorf("leases fit %q on an assumed 50K/s store", s.LeasesFit)
	}
	want := []string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--etcd-servers-overrides=coordination.k8s.io/leases#http://127.0.0.1:2381",
		"--etcd-servers-overrides=/events#http://127.0.0.1:2380",
		"--etcd-servers-overrides=/pods#http://127.0.0.1:2382",
	}
	if !reflect.DeepEqual(s.Flags, want) {
		t.Errorf("store flags:\n%s\nwant:\n%s", strings.Join(s.Flags, "\n"), strings.Join(want, "\n"))
	}
	if p.APIServer.Count != 11 || p.APIServer.GoawayChance != 0.001 || p.APIServer.FeatureGates != "" {
		t.Errorf("apiserver: %+v", p.APIServer)
	}
	if p.APIServer.ConnsPerAPIServer != 181819 || p.APIServer.WatchesPerAPIServer != 1636364 {
		t.Errorf("per apiserver: %d conns, %d watches", p.APIServer.ConnsPerAPIServer, p.APIServer.WatchesPerAPIServer)
	}
	if !contains(p.APIServer.Env, "GOGC=400") || !strings.HasPrefix(p.APIServer.GOMEMLIMIT, "222822") {
		t.Errorf("env %v", p.APIServer.Env)
	}
	if p.Kubelet.MaxPods != 110 || p.Kubelet.BridgePortLimit != 1023 || p.Kubelet.PodsPerNodeNeeded != 1 {
		t.Errorf("kubelet %+v", p.Kubelet)
	}
	// The committed simulate run: S=256 d=2 K=1 singles took 70.2 s × 1.25 on 272 cores; 60 s
	// needs 256 × 87.7 / 60 → 375 shards of that cost, 272 × 375 / 256 → 399 cores, 16 × 375 / 256 → 24 collectors.
	if sc := p.Scheduler; sc.Shards != 375 || sc.Cores != 399 || sc.Relays != 42 || sc.Scatter != 2 || sc.ParallelPods != 1 || sc.Collectors != 24 {
		t.Errorf("scheduler %+v", sc)
	}
	v4 := p.Addresses.IPv4
	if v4.PerNodeShare != "16" || v4.PodAddrsPerNode != "15" || v4.NodePrefix != "/28" || v4.HostLocalUsable != "13" || v4.NodeIPAM {
		t.Errorf("ipv4 %+v", v4)
	}
	if len(p.Addresses.IPv6) != 3 {
		t.Fatalf("ipv6 options %+v", p.Addresses.IPv6)
	}
	for i, w := range []struct{ node, cluster, last, addrs string }{
		{"/64", "/44", "fd00:0:f:423f::/64", "2^64"},
		{"/80", "/60", "fd00:0:0:f:423f::/80", "2^48"},
		{"/96", "/76", "fd00::f:423f:0:0/96", "4294967296"},
	} {
		o := p.Addresses.IPv6[i]
		if o.NodePrefix != w.node || o.ClusterPrefix != w.cluster || o.ExampleLast != w.last || o.AddrsPerNode != w.addrs || o.PodsPerNode != 110 || o.NodeIPAM {
			t.Errorf("ipv6 %d: %+v", i, o)
		}
	}
	// Problems: three stores over capacity, leases, and the locked B-tree watch cache.
	if len(p.Problems) != 5 || !strings.Contains(strings.Join(p.Problems, "\n"), "BtreeWatchCache is locked") {
		t.Errorf("problems:\n%s", strings.Join(p.Problems, "\n"))
	}
}

func TestPlanMeasuredStore(t *testing.T) {
	// A store that does 400K writes/s holds 1M nodes' leases on one shard.
	p := Plan(PlanInput{Nodes: 1_000_000, Pods: 1_000_000, StoreWritesPerSec: 400_000, StoreSource: "bench", LeaseDurationSeconds: 160, KubeMinor: 32})
	if p.Store.LeasesFit != "yes" {
		t.Errorf("leases fit %q", p.Store.LeasesFit)
	}
	if p.Store.LeaseWritesPerSec != 25_000 {
		t.Errorf("lease writes %v, want 25000 (1M / 40 s)", p.Store.LeaseWritesPerSec)
	}
	if p.APIServer.FeatureGates != "BtreeWatchCache=false" || !contains(p.APIServer.Flags, "--feature-gates=BtreeWatchCache=false") {
		t.Errorf("1.32 should get BtreeWatchCache=false: %v", p.APIServer.Flags)
	}
	if !contains(p.ControllerManager.Flags, "--node-monitor-grace-period=170s") {
		t.Errorf("controller-manager flags %v", p.ControllerManager.Flags)
	}
	if len(p.Problems) != 0 {
		t.Errorf("problems: %v", p.Problems)
	}
}

func TestPlanSmall(t *testing.T) {
	p := Plan(PlanInput{Nodes: 1000, Pods: 2000, CoresPerNode: 2})
	if len(p.Store.Shards) != 1 || len(p.Store.Flags) != 1 {
		t.Errorf("a 1000-node cluster needs one store: %+v", p.Store.Shards)
	}
	if p.APIServer.Count != 5 || p.APIServer.MaxMutatingInflight != 3000 || p.APIServer.MaxRequestsInflight != 1000 {
		t.Errorf("apiserver %+v", p.APIServer)
	}
	if p.Kubelet.MaxPodsGuideline != 20 || p.Kubelet.MaxPods != 20 || p.Kubelet.PodsPerNodeNeeded != 2 {
		t.Errorf("kubelet %+v", p.Kubelet)
	}
	if p.Scheduler.Shards != 1 || p.Scheduler.Relays != 0 {
		t.Errorf("scheduler %+v", p.Scheduler)
	}
	if len(p.Problems) != 0 {
		t.Errorf("problems: %v", p.Problems)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "--etcd-servers-overrides=/events#http://127.0.0.1:2380") {
		t.Errorf("notes should show how to split anyway: %v", p.Notes)
	}
	if p.APIServer.Count != 5 || p.APIServer.GoawayChance != 0.001 {
		t.Errorf("apiserver %+v", p.APIServer)
	}
	if p.Addresses.IPv6[0].ClusterPrefix != "/54" || !p.Addresses.IPv6[0].NodeIPAM || !strings.Contains(p.Addresses.IPv6[0].ClusterCIDRArg, "--node-cidr-mask-size-ipv6=64") {
		t.Errorf("ipv6 %+v", p.Addresses.IPv6[0])
	}
}

func TestPlanPodsPerNode(t *testing.T) {
	// Above the guideline: maxPods rises to what is needed, up to the bridge.
	p := Plan(PlanInput{Nodes: 100, Pods: 50_000, CoresPerNode: 64})
	if p.Kubelet.PodsPerNodeNeeded != 500 || p.Kubelet.MaxPods != 500 || len(p.Problems) != 0 {
		t.Errorf("500/node: %+v %v", p.Kubelet, p.Problems)
	}
	// Beyond the bridge: a problem.
	p = Plan(PlanInput{Nodes: 100, Pods: 200_000})
	if p.Kubelet.MaxPods != 1023 || len(p.Problems) == 0 || !strings.Contains(p.Problems[len(p.Problems)-1], "bridge") {
		t.Errorf("2000/node: %+v %v", p.Kubelet, p.Problems)
	}
	if !p.Addresses.IPv4.Enough || p.Addresses.IPv4.PodAddrsPerNode != "167771" {
		t.Errorf("a /8 over 100 nodes holds 2000 pods per node: %+v", p.Addresses.IPv4)
	}
}

func TestPlanSingleAPIServerNoGoaway(t *testing.T) {
	p := Plan(PlanInput{Nodes: 10, Pods: 10})
	if p.APIServer.Count != 3 {
		t.Fatalf("count %d", p.APIServer.Count)
	}
	p = Plan(PlanInput{Nodes: 10, Pods: 10, KubeMinor: 18})
	if p.APIServer.WatchCacheSizes == "" || !strings.HasPrefix(p.APIServer.WatchCacheSizes, "nodes#5000,pods#10000") {
		t.Errorf("old apiserver watch cache sizes %q", p.APIServer.WatchCacheSizes)
	}
}

func TestPlanOutputs(t *testing.T) {
	p := Plan(PlanInput{Nodes: 1_000_000, Pods: 1_000_000})
	flags := p.FlagsText()
	for _, w := range []string{
		"# kube-apiserver (× 11)",
		"--etcd-servers-overrides=/events#http://127.0.0.1:2380\n",
		"--etcd-servers-overrides=coordination.k8s.io/leases#http://127.0.0.1:2381\n",
		"--etcd-servers-overrides=/pods#http://127.0.0.1:2382\n",
		"--goaway-chance=0.001\n",
		"GOGC=400\n",
		"--max-pods=110\n",
		"--proxy-mode=nftables\n",
		"# scheduler shards (× 375, 42 relays, fanout 10)",
		"--shards=375\n--scatter=2\n--parallel-pods=1\n--collectors=24\n",
	} {
		if !strings.Contains(flags, w) {
			t.Errorf("flags output lacks %q:\n%s", w, flags)
		}
	}
	y := p.YAMLText()
	for _, w := range []string{
		"store:\n  capacity_writes_per_sec: 51563\n",
		"  flags:\n    - \"--etcd-servers=http://127.0.0.1:2379\"\n",
		"    - name: \"leases\"\n      resources:\n        - \"leases\"\n",
		"kind: KubeletConfiguration\nmaxPods: 110\n",
		"nodeLeaseDurationSeconds: 40\n",
		"kind: KubeProxyConfiguration\nmode: nftables\n",
		"pod_addrs_per_node: \"15\"",
	} {
		if !strings.Contains(y, w) {
			t.Errorf("yaml output lacks %q", w)
		}
	}
	var sb strings.Builder
	p.WriteTable(&sb)
	for _, w := range []string{"15 for pods", "--etcd-servers-overrides=/events#http://127.0.0.1:2380", "PROBLEMS", "375", "FIGURES USED",
		"51563 writes/s per store", "default: meganode-store lease-flood", "default: docs/bench/scheduler-sim/run-100k.json"} {
		if !strings.Contains(sb.String(), w) {
			t.Errorf("table lacks %q", w)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back PlanOutput
	if err := json.Unmarshal(b, &back); err != nil || back.APIServer.Count != 11 {
		t.Errorf("json round trip: %v %d", err, back.APIServer.Count)
	}
}

func TestPlanValidate(t *testing.T) {
	if err := (PlanInput{Nodes: 0}).Validate(); err == nil {
		t.Error("0 nodes accepted")
	}
	if err := (PlanInput{Nodes: 1, PodCIDRv4: "10.0.0.0"}).Validate(); err == nil {
		t.Error("bad CIDR accepted")
	}
	if err := (PlanInput{Nodes: 1, Pods: 1}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestStoreThroughput(t *testing.T) {
	for _, c := range []struct {
		name, json string
		want       float64
		descHas    string
		bad        bool
	}{
		{"flat object", `{"workload":"put","target":"etcd","ops_per_sec":24000}`, 24000, "put on etcd", false},
		{"prefers lease-flood on meganode", `{"runs":[
			{"workload":"put","target":"meganode","ops_per_sec":90000},
			{"workload":"lease-flood","target":"etcd","ops_per_sec":20000},
			{"workload":"lease-flood","target":"meganode","ops_per_sec":60000},
			{"workload":"lease-flood","target":"meganode","ops_per_sec":65000}]}`, 62500, "lease-flood on meganode), median of 2 rounds", false},
		{"best configuration, median of its rounds", `{"runs":[
			{"workload":"lease-flood","target":"meganode","clients":100,"ops_per_sec":45000},
			{"workload":"lease-flood","target":"meganode","clients":1000,"ops_per_sec":40000},
			{"workload":"lease-flood","target":"meganode","clients":1000,"ops_per_sec":70000},
			{"workload":"lease-flood","target":"meganode","clients":1000,"ops_per_sec":46000}]}`, 46000, "at 1000 clients), median of 3 rounds", false},
		{"inherits labels", `{"workload":"lease-flood","results":{"meganode":{"target":"meganode","throughput":41000},"etcd":{"target":"etcd","throughput":23000}}}`, 41000, "lease-flood on meganode", false},
		{"array of runs", `[{"name":"put","ops_s":1000},{"name":"put","ops_s":3000}]`, 2000, "put", false},
		{"no throughput", `{"workload":"put"}`, 0, "", true},
		{"not json", `nope`, 0, "", true},
	} {
		got, desc, err := StoreThroughput([]byte(c.json))
		if (err != nil) != c.bad || got != c.want || !strings.Contains(desc, c.descHas) {
			t.Errorf("%s: %v %q %v", c.name, got, desc, err)
		}
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
