package doctor

import (
	"fmt"
	"sort"
)

// Source is where a recommendation comes from. Every rule and every plan figure
// names at least one, so the report (and docs/doctor.md) can say why.
type Source struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Where string `json:"where"`
}

// Sources is the catalogue, keyed by ID.
var Sources = map[string]Source{
	"design-4": {"design-4", "meganode design brief §4 (scheduling a million pods)",
		"shared/design.md §4: scatter/gather shards, relay tree fanout ~10, 256 shards + 29 relays for 1M pods in ~70 s, GOGC≈800, GOMEMLIMIT≈90%"},
	"design-5": {"design-5", "meganode design brief §5 (kube-apiserver at scale)",
		"shared/design.md §5: ~100K lease writes/s at 1M nodes, 11 apiservers with the hash-map watch cache, ~18 watches per node, ≥1 connection per kubelet, --etcd-servers-overrides, --goaway-chance, 1 s / 5 s SLOs"},
	"design-6": {"design-6", "meganode design brief §6 (hosts and networks)",
		"shared/design.md §6: /8 gives 15 addresses per node at 1M nodes, IPv6 /64|/80|/96 per node, bridge ≤1024 ports, gc_thresh above ~500 pods, conntrack per core, masters per node count"},
	"pods-per-node": {"pods-per-node", "pods-per-node article (Habr, 2024: maxPods 100500 on one node)",
		"shared/seeds/001_*.txt: min(110, 10×cores) guideline; bridge cni0 'exchange full' at ~1024 pods (BR_PORT_BITS=10); 'neighbor table overflow' / 'no route to host' above ~500 pods fixed with gc_thresh 2048/4096/8192; nftables needs kernel ≥ 5.13"},
	"tuning-guide": {"tuning-guide", "large-cluster tuning guide (大规模 Kubernetes 集群调优设置)",
		"shared/seeds/004_*.txt: masters 200→3, 1000→5, 2500→7, 4000→9, 5000→11; inflight 3000/1000; watch-cache-sizes; --goaway-chance=0.001; etcd split pods/leases/events/rest with --etcd-servers-overrides; controller-manager concurrency and QPS; conntrack-max-per-core; per-client qps ≈ apiserver qps / nodes"},
	"meganode-bench": {"meganode-bench", "meganode's own store benchmark (`meganode bench`, docs/benchmarks.md)",
		"docs/bench/results.json (2026-11-28, 2 CPUs): meganode-store lease-flood 51,563 writes/s at 1000 clients (median of 3 rounds), 6.1 µs server CPU per write; or --bench-json from the target machine"},
	"meganode-bench-group": {"meganode-bench-group", "meganode's own replicated-store measurements (`meganode bench catch-up`, `meganode bench group-put`)",
		fmt.Sprintf("docs/bench/catch-up/model.json (2 cores): a member's memory %.0f MiB + %.0f B per object of Nodes, Pods and Leases, serving after %.2f s + %.2f µs per object from an empty start; docs/bench/replicated-put/leader-only.txt: CPU per put %.1f µs on the leader, %.1f µs on each follower, every member an endpoint",
			GroupMemberFixedBytes/float64(1<<20), GroupMemberBytesPerObject, CatchUpFixedSeconds, CatchUpMicrosPerObject, GroupLeaderMicrosPerWrite, GroupFollowerMicrosPerWrite)},
	"meganode-bench-nodes": {"meganode-bench-nodes", "meganode's own kubelet-vs-KWOK measurement (`meganode bench nodes`, docs/bench/kubelets/README.md)",
		"docs/bench/kubelets/side-by-side/meganode/report.json (2 cores, meganode-store): 200 hollow kubelets (the kubelet's own code) and 200 KWOK nodes, 5 pods per node; store writes by resource per node per second (steady) and per pod started, watches on kube-apiserver per node; or --nodes-json from the target's own run"},
	"design-10": {"design-10", "meganode-store design §10 (docs/design.md, Replication)",
		"a group answers a write once a quorum holds it in memory (durability replicated); a member that restarts empty rejoins by the leader's snapshot; all members down at once lose the data; peer traffic is plain TCP"},
	"scheduler-simulate": {"scheduler-simulate", "meganode's own scheduler measurement (`meganode scheduler simulate --json`)",
		"docs/bench/scheduler-sim/run-100k.json (2026-11-25, 2 cores): per-pod costs measured on this code, projected by the model to 1M pods on 1M nodes per shape (S, d, K, batch) with the cores used; or --simulate-json"},
	"k8s-1m": {"k8s-1m", "k8s-1m article (one million nodes; Russian translation)",
		"shared/seeds/000_*.txt: 10.0.0.0/8 → 15 IPs per node at 1M nodes; per-node IPv6 prefixes (Vultr /64, AWS /80, GCP /96) on one bridge; etcd ≈50K writes/s; 11 apiservers held 100K lease updates/s; apiserver peak ≈256 GB; GOMEMLIMIT 10–20% below memory, GOGC several hundred; 256 schedulers + 29 relays, fanout 10"},
	"kernel-neigh": {"kernel-neigh", "Linux kernel: Documentation/networking/ip-sysctl.rst (neigh/default/gc_thresh1..3)",
		"defaults gc_thresh1=128, gc_thresh2=512 (soft max, GC after 5 s), gc_thresh3=1024 (hard max): ratio 1:4:8"},
	"kernel-bridge": {"kernel-bridge", "Linux kernel: net/bridge/br_private.h BR_PORT_BITS=10, net/bridge/br_if.c find_portno()",
		"BR_MAX_PORTS = 1<<10 = 1024 port numbers; port 0 is reserved, so 1023 ports attach and the next gets EXFULL ('Exchange full')"},
	"kernel-conntrack": {"kernel-conntrack", "Linux kernel: Documentation/networking/nf_conntrack-sysctl.rst",
		"nf_conntrack_max is the table size; nf_conntrack_buckets the hash size (writable in the initial netns)"},
	"kernel-sysctl": {"kernel-sysctl", "Linux kernel: Documentation/admin-guide/sysctl/{net,fs,kernel}.rst",
		"net.core.somaxconn (default 4096 since 5.4), net.ipv4.tcp_max_syn_backlog, fs.file-max, fs.nr_open (caps RLIMIT_NOFILE, default 1048576), kernel.pid_max (up to 4194304 on 64-bit), ip_local_port_range default 32768–60999"},
	"go-backlog": {"go-backlog", "Go net package: listen backlog is read from /proc/sys/net/core/somaxconn",
		"kube-apiserver and the store are Go servers: the listen backlog they ask for is somaxconn, so somaxconn is their accept queue"},
	"k8s-kube-proxy": {"k8s-kube-proxy", "Kubernetes default: kube-proxy --conntrack-max-per-core=32768, --conntrack-min=131072",
		"kube-proxy sets nf_conntrack_max = max(per-core × cores, min) and hashsize = max/4 at start"},
	"k8s-nftables": {"k8s-nftables", "Kubernetes: kube-proxy nftables mode (KEP-3866; GA in 1.33) needs Linux ≥ 5.13",
		"iptables mode rule updates grow with services (tuning guide: one rule at 20K services took 5 h); nftables is O(1) per packet"},
	"k8s-nodeport": {"k8s-nodeport", "Kubernetes default: --service-node-port-range=30000-32767",
		"the ephemeral port range must not overlap NodePorts on hosts that run kube-proxy"},
	"k8s-kubelet": {"k8s-kubelet", "Kubernetes defaults: kubelet maxPods=110, nodeLeaseDurationSeconds=40 (renewed every 10 s = 1/4), nodeStatusUpdateFrequency=10s, nodeStatusReportFrequency=5m, kubeAPIQPS=50, kubeAPIBurst=100",
		"kubelet configuration (kubelet.config.k8s.io/v1beta1)"},
	"k8s-limits": {"k8s-limits", "Kubernetes docs: Considerations for large clusters",
		"≤110 pods per node, ≤5,000 nodes, ≤150,000 pods, ≤300,000 containers"},
	"k8s-apiserver": {"k8s-apiserver", "Kubernetes defaults and flag help: kube-apiserver",
		"--max-requests-inflight=400, --max-mutating-requests-inflight=200 (with APF their sum is the server's concurrency); --etcd-servers-overrides group/resource#servers (servers ';'-separated, overrides ','-separated or repeated); --watch-cache-sizes: since dynamic sizing only 0 (disable) is meaningful"},
	"k8s-feature-gates": {"k8s-feature-gates", "Kubernetes feature gates: BtreeWatchCache",
		"beta (on) in 1.32, GA and locked on since 1.33: BtreeWatchCache=false is accepted only up to 1.32"},
	"k8s-node-ipam": {"k8s-node-ipam", "kube-controller-manager node IPAM (cidrset): node mask ≤ cluster mask + 16",
		"--allocate-node-cidrs can hand out at most 65,536 node CIDRs per cluster CIDR"},
	"k8s-controller-manager": {"k8s-controller-manager", "Kubernetes defaults: kube-controller-manager",
		"--kube-api-qps=20, --kube-api-burst=30, --concurrent-deployment-syncs=5, --concurrent-replicaset-syncs=5, --concurrent-namespace-syncs=10, --node-monitor-grace-period=50s (40s before 1.32)"},
	"k8s-scheduler": {"k8s-scheduler", "Kubernetes defaults: kube-scheduler client QPS 50, burst 100",
		"toolchain notes: scheduler client QPS 50 and controller-manager QPS 20 cap pods/s"},
	"etcd-disk": {"etcd-disk", "etcd docs (tuning / hardware): WAL fsync p99 < 10 ms",
		"etcd_disk_wal_fsync_duration_seconds p99 should stay below 10 ms; OpenShift's fio check warns above 20 ms"},
	"assumption": {"assumption", "meganode assumption (stated in the check's text)",
		"a figure no source gives directly; the check says what was assumed so it can be challenged"},
}

// SourceList resolves IDs to Sources, in the given order, skipping unknown IDs.
func SourceList(ids ...string) []Source {
	out := make([]Source, 0, len(ids))
	for _, id := range ids {
		if s, ok := Sources[id]; ok {
			out = append(out, s)
		}
	}
	return out
}

// SourceIDs returns every catalogued ID, sorted.
func SourceIDs() []string {
	ids := make([]string, 0, len(Sources))
	for id := range Sources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
