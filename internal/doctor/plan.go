package doctor

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strings"
)

// Plan sizes a cluster of Nodes nodes and Pods pods. It is pure: the same input
// gives the same output, so `meganode up` can take its flags from it.

// Defaults for PlanInput's zero values.
const (
	DefaultLeaseDurationSeconds = 40 // kubelet nodeLeaseDurationSeconds; renewed every 1/4
	DefaultScheduleSeconds      = 60 // design §4 goal: 1M pods in 60 s
	// DefaultStoreWritesPerSec is meganode-store's lease-flood throughput in the committed
	// benchmark run (DefaultStoreSource); --bench-json replaces it with a measurement on the
	// target machine. TestDefaultStoreIsTheCommittedRun keeps it equal to docs/bench/results.json.
	DefaultStoreWritesPerSec = 51_563
	DefaultStoreSource       = "default: meganode-store lease-flood (the apiserver's lease Txn), 1000 clients, buffered durability, median of 3 rounds, " +
		"docs/benchmarks.md run of 2026-11-28 09:24 UTC on 2 CPUs shared with the load generator (client-bound: server 6.1 µs CPU per write); " +
		"pass --bench-json with a `meganode bench lease-flood` result from the target machine"
	DefaultStoreHost     = "127.0.0.1"
	DefaultStoreBasePort = 2379
	DefaultPodCIDRv4     = "10.0.0.0/8"
	DefaultKubeMinor     = 36 // the Kubernetes we build (1.36.3)
	// StoreTargetUtilisation leaves headroom in each store for bursts,
	// compaction and LISTs: a resource is split off when the main store would
	// run above half its measured capacity.
	StoreTargetUtilisation = 0.5
	// BTreeWatchCacheUpdatesPerSec is where the B-tree watch cache topped out (design §5).
	BTreeWatchCacheUpdatesPerSec = 40_000
	// WatchesPerNode is how many watches each node opens (design §5).
	WatchesPerNode = 18
	// NodeStatusReportSeconds is the kubelet's nodeStatusReportFrequency (5m):
	// with leases, an unchanged node status is written this often.
	NodeStatusReportSeconds = 300
	// WritesPerPodStart: create, binding, two status updates (pending → running).
	WritesPerPodStart = 4
	// EventsPerPodStart: Scheduled, Pulled, Created, Started.
	EventsPerPodStart = 4
	// SchedulerFanout is the relay tree's fanout (design §4).
	SchedulerFanout = 10
)

// PlanInput is what the plan is sized for. Zero values take the defaults above.
type PlanInput struct {
	Nodes                int     `json:"nodes"`
	Pods                 int     `json:"pods"`
	CoresPerNode         int     `json:"cores_per_node,omitempty"`
	LeaseDurationSeconds int     `json:"lease_duration_seconds"`
	StoreWritesPerSec    float64 `json:"store_writes_per_sec"`
	StoreSource          string  `json:"store_source"`
	PodsPerSecond        float64 `json:"pods_per_second"`
	ScheduleSeconds      float64 `json:"schedule_seconds"`
	APIServerMemoryGiB   float64 `json:"apiserver_memory_gib"`
	StoreHost            string  `json:"store_host"`
	StoreBasePort        int     `json:"store_base_port"`
	PodCIDRv4            string  `json:"pod_cidr_v4"`
	KubeMinor            int     `json:"kube_minor"`
	BridgePorts          int     `json:"bridge_ports"`
	// StoreReplicas is the members of each store's replicated group; 0 or 1: single members
	// (the plan is then what it was before groups existed).
	StoreReplicas int `json:"store_replicas,omitempty"`
	// SimProjections are `meganode scheduler simulate` projections to size the scheduler
	// from (SimulateProjections), and SimSource where they came from; none: the committed run's.
	SimProjections []SimProjection `json:"-"`
	SimSource      string          `json:"sim_source"`
	// NodeAgent: per-node store writes, watches and per-pod-start writes measured on real
	// kubelets (`doctor plan --node-agent kubelet`); nil: the plan's own figures (KWOK's).
	NodeAgent *NodeAgentFigures `json:"node_agent,omitempty"`
}

func (in PlanInput) normalise() PlanInput {
	if in.LeaseDurationSeconds <= 0 {
		in.LeaseDurationSeconds = DefaultLeaseDurationSeconds
	}
	if in.StoreWritesPerSec <= 0 {
		in.StoreWritesPerSec = DefaultStoreWritesPerSec
		in.StoreSource = DefaultStoreSource
	}
	if len(in.SimProjections) == 0 {
		in.SimProjections = DefaultSimProjections
		in.SimSource = "default: " + DefaultSimSource + "; pass --simulate-json with `meganode scheduler simulate --json` output"
	}
	if in.ScheduleSeconds <= 0 {
		in.ScheduleSeconds = DefaultScheduleSeconds
	}
	if in.PodsPerSecond <= 0 {
		in.PodsPerSecond = float64(in.Pods) / in.ScheduleSeconds
	}
	if in.StoreHost == "" {
		in.StoreHost = DefaultStoreHost
	}
	if in.StoreBasePort <= 0 {
		in.StoreBasePort = DefaultStoreBasePort
	}
	if in.PodCIDRv4 == "" {
		in.PodCIDRv4 = DefaultPodCIDRv4
	}
	if in.KubeMinor <= 0 {
		in.KubeMinor = DefaultKubeMinor
	}
	if in.BridgePorts <= 0 {
		in.BridgePorts = BridgeMaxPorts
	}
	if in.StoreReplicas == 1 {
		in.StoreReplicas = 0
	}
	if in.APIServerMemoryGiB <= 0 {
		// k8s-1m: an apiserver peaked at ~256 GB at 1M nodes; scale linearly, ≥ 8 GiB.
		in.APIServerMemoryGiB = math.Max(8, math.Ceil(256*float64(in.Nodes)/1e6))
	}
	return in
}

// Validate reports unusable input.
func (in PlanInput) Validate() error {
	if in.Nodes <= 0 {
		return fmt.Errorf("--nodes must be > 0")
	}
	if in.Pods < 0 {
		return fmt.Errorf("--pods must be ≥ 0")
	}
	if in.StoreReplicas < 0 {
		return fmt.Errorf("--store-replicas must be ≥ 1")
	}
	if _, err := netip.ParsePrefix(in.normalise().PodCIDRv4); err != nil {
		return fmt.Errorf("--pod-cidr: %w", err)
	}
	return nil
}

// WriteLoad is the write rate one resource puts on the store.
type WriteLoad struct {
	Resource     string  `json:"resource"`
	WritesPerSec float64 `json:"writes_per_sec"`
	Basis        string  `json:"basis"`
}

// StoreShard is one store and what it holds.
type StoreShard struct {
	Name         string   `json:"name"`
	Resources    []string `json:"resources"`
	Endpoint     string   `json:"endpoint"`
	WritesPerSec float64  `json:"writes_per_sec"`
	Utilisation  float64  `json:"utilisation"`
	Override     string   `json:"override,omitempty"` // the --etcd-servers-overrides value; "" for the default store
}

// StorePlan is the store sizing.
type StorePlan struct {
	CapacityWritesPerSec float64      `json:"capacity_writes_per_sec"`
	CapacitySource       string       `json:"capacity_source"`
	LeaseRenewSeconds    float64      `json:"lease_renew_seconds"`
	LeaseWritesPerSec    float64      `json:"lease_writes_per_sec"`
	LeasesFit            string       `json:"leases_fit"` // yes | tight | no
	Loads                []WriteLoad  `json:"loads"`
	TotalWritesPerSec    float64      `json:"total_writes_per_sec"`
	Shards               []StoreShard `json:"shards"`
	Flags                []string     `json:"flags"`
	MinLeaseDuration     int          `json:"min_lease_duration_seconds,omitempty"`
	Sources              []string     `json:"sources"`
}

// APIServerPlan is the kube-apiserver sizing.
type APIServerPlan struct {
	Count               int      `json:"count"`
	CountBasis          string   `json:"count_basis"`
	ConnsPerAPIServer   int      `json:"conns_per_apiserver"`
	WatchesPerNode      float64  `json:"watches_per_node"` // WatchesPerNode, or the node agent's measured figure
	WatchesPerAPIServer int      `json:"watches_per_apiserver"`
	WritesPerAPIServer  float64  `json:"writes_per_apiserver"`
	WatchEventsPerSec   float64  `json:"watch_events_per_sec"`
	MaxRequestsInflight int      `json:"max_requests_inflight"`
	MaxMutatingInflight int      `json:"max_mutating_requests_inflight"`
	GoawayChance        float64  `json:"goaway_chance"`
	MemoryGiB           float64  `json:"memory_gib"`
	GOGC                int      `json:"gogc"`
	GOMEMLIMIT          string   `json:"gomemlimit"`
	WatchCacheSizes     string   `json:"watch_cache_sizes,omitempty"`
	FeatureGates        string   `json:"feature_gates,omitempty"`
	Flags               []string `json:"flags"`
	Env                 []string `json:"env"`
	Sources             []string `json:"sources"`
}

// ControllerManagerPlan is the kube-controller-manager sizing.
type ControllerManagerPlan struct {
	KubeAPIQPS   int      `json:"kube_api_qps"`
	KubeAPIBurst int      `json:"kube_api_burst"`
	Flags        []string `json:"flags"`
	Sources      []string `json:"sources"`
}

// KubeletPlan is the node agent's settings.
type KubeletPlan struct {
	NodeStatusUpdateFrequency string   `json:"node_status_update_frequency"`
	NodeLeaseDurationSeconds  int      `json:"node_lease_duration_seconds"`
	LeaseRenewSeconds         float64  `json:"lease_renew_seconds"`
	KubeAPIQPS                int      `json:"kube_api_qps"`
	KubeAPIBurst              int      `json:"kube_api_burst"`
	PodsPerNodeNeeded         int      `json:"pods_per_node_needed"`
	MaxPodsGuideline          int      `json:"max_pods_guideline"`
	BridgePortLimit           int      `json:"bridge_port_limit"`
	MaxPods                   int      `json:"max_pods"`
	MaxPodsBasis              string   `json:"max_pods_basis"`
	KubeProxyMode             string   `json:"kube_proxy_mode"`
	ConntrackMaxPerCore       int      `json:"conntrack_max_per_core"`
	Flags                     []string `json:"flags"`
	Sources                   []string `json:"sources"`
}

// SchedulerPlan is the scheduler layout.
type SchedulerPlan struct {
	Shards       int      `json:"shards"`
	Cores        int      `json:"cores"`
	Scatter      int      `json:"scatter"`       // d: shards each pod is sent to
	ParallelPods int      `json:"parallel_pods"` // K: pods a shard evaluates at once
	Collectors   int      `json:"collectors"`
	Relays       int      `json:"relays"`
	RelayLevels  []int    `json:"relay_levels,omitempty"`
	Fanout       int      `json:"fanout"`
	Seconds      float64  `json:"estimated_seconds"`
	Basis        string   `json:"basis"`
	Source       string   `json:"source"` // the simulate JSON the figures came from
	KubeAPIQPS   int      `json:"kube_api_qps"`
	KubeAPIBurst int      `json:"kube_api_burst"`
	GOGC         int      `json:"gogc"`
	GOMEMLIMIT   string   `json:"gomemlimit"`
	Flags        []string `json:"flags"`
	Sources      []string `json:"sources"`
}

// IPv4Plan is what an IPv4 pod range gives each node.
type IPv4Plan struct {
	CIDR            string `json:"cidr"`
	PerNodeShare    string `json:"per_node_share"`
	PodAddrsPerNode string `json:"pod_addrs_per_node"` // share minus the node's own address
	NodePrefix      string `json:"node_prefix,omitempty"`
	HostLocalUsable string `json:"host_local_usable,omitempty"`
	Enough          bool   `json:"enough"`
	NodeIPAM        bool   `json:"kcm_node_ipam_ok"`
	Note            string `json:"note"`
}

// IPv6Option is one per-node prefix size.
type IPv6Option struct {
	NodePrefix     string `json:"node_prefix"`
	Provider       string `json:"provider"`
	AddrsPerNode   string `json:"addrs_per_node"`
	PodsByAddress  string `json:"pods_by_address"`
	PodsPerNode    int    `json:"pods_per_node"` // min(addresses − 1, bridge ports, maxPods)
	ClusterPrefix  string `json:"cluster_prefix"`
	ExampleLast    string `json:"example_last_node"`
	NodeIPAM       bool   `json:"kcm_node_ipam_ok"`
	ClusterCIDRArg string `json:"flags"`
}

// AddressPlan is the pod address plan.
type AddressPlan struct {
	IPv4    IPv4Plan     `json:"ipv4"`
	IPv6    []IPv6Option `json:"ipv6"`
	Note    string       `json:"note"`
	Sources []string     `json:"sources"`
}

// PlanOutput is the whole plan.
type PlanOutput struct {
	Input             PlanInput             `json:"input"`
	Store             StorePlan             `json:"store"`
	StoreGroup        *StoreGroupPlan       `json:"store_group,omitempty"` // with --store-replicas > 1
	APIServer         APIServerPlan         `json:"apiserver"`
	ControllerManager ControllerManagerPlan `json:"controller_manager"`
	Kubelet           KubeletPlan           `json:"kubelet"`
	Scheduler         SchedulerPlan         `json:"scheduler"`
	Addresses         AddressPlan           `json:"addresses"`
	Figures           []Figure              `json:"figures"`
	Problems          []string              `json:"problems"`
	Notes             []string              `json:"notes"`
}

// Figure is a measured (or default) figure the plan used: which lines of the plan it sized,
// its value, and where it came from.
type Figure struct {
	Lines  string `json:"lines"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// APIServerCountTable is the tuning guide's control-plane sizing.
var APIServerCountTable = []struct{ MaxNodes, APIServers int }{
	{200, 3}, {1000, 5}, {2500, 7}, {4000, 9}, {5000, 11},
}

// NodesPerAPIServerAtScale extrapolates above 5,000 nodes from the only
// measurement there is (design §5, k8s-1m): 11 apiservers held 1M nodes'
// lease updates, i.e. ~90,910 nodes (~9.1K lease writes/s) per apiserver.
const NodesPerAPIServerAtScale = 1_000_000.0 / 11

// APIServerCount is how many apiservers a cluster of nodes needs: the tuning
// guide's table up to 5,000 nodes (200→3, 1000→5, 2500→7, 4000→9, 5000→11),
// above that max(11, ceil(nodes / 90,910)) from the 1M-node measurement.
// (Extrapolating the table linearly would ask ~2,000 apiservers for 1M nodes,
// which the measurement contradicts: every apiserver sees every event anyway.)
func APIServerCount(nodes int) int {
	for _, r := range APIServerCountTable {
		if nodes <= r.MaxNodes {
			return r.APIServers
		}
	}
	n := int(math.Ceil(float64(nodes) / NodesPerAPIServerAtScale))
	if n < 11 {
		n = 11
	}
	return n
}

func apiServerCountBasis(nodes int) string {
	if nodes <= 5000 {
		return "tuning guide: ≤200 nodes → 3, ≤1000 → 5, ≤2500 → 7, ≤4000 → 9, ≤5000 → 11"
	}
	return "above 5000 nodes: max(11, nodes / 90,910) — 11 apiservers held 1M nodes' 100K lease writes/s (design §5, k8s-1m)"
}

// MaxPodsGuideline is min(110, 10 × cores); 110 when cores is unknown.
func MaxPodsGuideline(cores int) int {
	if cores <= 0 {
		return 110
	}
	return min(110, 10*cores)
}

// RelayTree is the relay count per level for shards leaves with the given
// fanout, bottom level first. Levels are added until one has ≤ fanout relays:
// those top relays each watch the apiserver themselves (256 shards → 26 + 3 = 29
// relays, as in the reference). One shard needs no relay.
func RelayTree(shards, fanout int) []int {
	if shards <= 1 || fanout < 2 {
		return nil
	}
	var levels []int
	c := ceilDiv(shards, fanout)
	levels = append(levels, c)
	for c > fanout {
		c = ceilDiv(c, fanout)
		levels = append(levels, c)
	}
	return levels
}

// StoreOverride is one --etcd-servers-overrides value.
func StoreOverride(resource, endpoint string) string {
	return overrideKey(resource) + "#" + endpoint
}

func overrideKey(resource string) string {
	switch resource {
	case "leases":
		return "coordination.k8s.io/leases"
	case "events":
		return "/events"
	case "pods":
		return "/pods"
	}
	return resource
}

// shardPort gives each split resource a fixed port after the default store's.
var shardPort = map[string]int{"rest": 0, "events": 1, "leases": 2, "pods": 3}

// StoreEndpoint is the URL of the store holding resource.
func StoreEndpoint(host string, basePort int, resource string) string {
	return fmt.Sprintf("http://%s:%d", host, basePort+shardPort[resource])
}

// Plan computes the plan.
func Plan(in PlanInput) PlanOutput {
	in = in.normalise()
	out := PlanOutput{Input: in}
	n := float64(in.Nodes)

	// --- store ---
	sp := &out.Store
	sp.Sources = []string{"meganode-bench", "design-5", "tuning-guide", "k8s-kubelet", "k8s-apiserver"}
	sp.CapacityWritesPerSec = in.StoreWritesPerSec
	sp.CapacitySource = in.StoreSource
	sp.LeaseRenewSeconds = float64(in.LeaseDurationSeconds) / 4
	sp.LeaseWritesPerSec = n / sp.LeaseRenewSeconds
	sp.Loads = []WriteLoad{
		{"leases", sp.LeaseWritesPerSec, fmt.Sprintf("%d nodes / %.4g s renew (nodeLeaseDurationSeconds %d / 4)", in.Nodes, sp.LeaseRenewSeconds, in.LeaseDurationSeconds)},
		{"events", EventsPerPodStart * in.PodsPerSecond, fmt.Sprintf("%d events per pod start × %.4g pods/s", EventsPerPodStart, in.PodsPerSecond)},
		{"pods", WritesPerPodStart * in.PodsPerSecond, fmt.Sprintf("%d writes per pod start × %.4g pods/s", WritesPerPodStart, in.PodsPerSecond)},
		{"rest", n / NodeStatusReportSeconds, fmt.Sprintf("node status: %d nodes / %d s (nodeStatusReportFrequency) + the rest", in.Nodes, NodeStatusReportSeconds)},
	}
	if a := in.NodeAgent; a != nil {
		// Measured on kubelets: leases keep the formula above (the lease interval is an input;
		// the kubelets measured renewed every 10 s, LeaseWritesPerNodeSec), the other loads are
		// per node per second plus per pod started.
		load := func(perNode, perPod float64, what string) (float64, string) {
			return perNode*n + perPod*in.PodsPerSecond, fmt.Sprintf("kubelet, measured: %.4g %s writes/s per node × %d nodes + %.3g per pod start × %.4g pods/s",
				perNode, what, in.Nodes, perPod, in.PodsPerSecond)
		}
		sp.Loads[1].WritesPerSec, sp.Loads[1].Basis = load(a.EventWritesPerNodeSec, a.EventWritesPerPodStart, "event")
		sp.Loads[2].WritesPerSec, sp.Loads[2].Basis = load(a.PodWritesPerNodeSec, a.PodWritesPerPodStart, "pod")
		sp.Loads[3].WritesPerSec, sp.Loads[3].Basis = load(a.RestWritesPerNodeSec, a.RestWritesPerPodStart, "other (node status, …)")
		sp.Sources = append(sp.Sources, "meganode-bench-nodes")
	}
	for _, l := range sp.Loads {
		sp.TotalWritesPerSec += l.WritesPerSec
	}
	c := sp.CapacityWritesPerSec
	switch {
	case sp.LeaseWritesPerSec <= StoreTargetUtilisation*c:
		sp.LeasesFit = "yes"
	case sp.LeaseWritesPerSec <= c:
		sp.LeasesFit = "tight"
	default:
		sp.LeasesFit = "no"
	}
	// Split off the heaviest resources while the default store runs above target.
	main := sp.TotalWritesPerSec
	split := map[string]bool{}
	cands := []WriteLoad{sp.Loads[0], sp.Loads[1], sp.Loads[2]}
	sortLoads(cands)
	for _, l := range cands {
		if main <= StoreTargetUtilisation*c || l.WritesPerSec == 0 {
			break
		}
		split[l.Resource] = true
		main -= l.WritesPerSec
	}
	rest := StoreShard{Name: "rest", Endpoint: StoreEndpoint(in.StoreHost, in.StoreBasePort, "rest"), WritesPerSec: main}
	for _, l := range sp.Loads {
		if !split[l.Resource] {
			rest.Resources = append(rest.Resources, l.Resource)
		}
	}
	rest.Utilisation = main / c
	sp.Shards = append(sp.Shards, rest)
	sp.Flags = append(sp.Flags, "--etcd-servers="+rest.Endpoint)
	for _, l := range sp.Loads[:3] { // fixed order: leases, events, pods
		if !split[l.Resource] {
			continue
		}
		ep := StoreEndpoint(in.StoreHost, in.StoreBasePort, l.Resource)
		sh := StoreShard{Name: l.Resource, Resources: []string{l.Resource}, Endpoint: ep, WritesPerSec: l.WritesPerSec,
			Utilisation: l.WritesPerSec / c, Override: StoreOverride(l.Resource, ep)}
		sp.Shards = append(sp.Shards, sh)
		sp.Flags = append(sp.Flags, "--etcd-servers-overrides="+sh.Override)
	}
	for _, sh := range sp.Shards {
		if sh.WritesPerSec > c {
			out.Problems = append(out.Problems, fmt.Sprintf("store %q: %.0f writes/s > one store's %.0f/s, and kube-apiserver cannot spread one resource over several stores", sh.Name, sh.WritesPerSec, c))
		}
	}
	if sp.LeasesFit != "yes" {
		renew := math.Ceil(n / (StoreTargetUtilisation * c))
		sp.MinLeaseDuration = int(4 * renew)
		msg := fmt.Sprintf("leases: %.0f writes/s vs %.0f/s per store: use a faster store (meganode-store; measure with `meganode bench lease-flood`) or lengthen nodeLeaseDurationSeconds to ≥ %d (renew every %.0f s; node failures are noticed later)",
			sp.LeaseWritesPerSec, c, sp.MinLeaseDuration, renew)
		if sp.LeasesFit == "no" {
			out.Problems = append(out.Problems, msg)
		} else {
			out.Notes = append(out.Notes, msg)
		}
	}
	if len(sp.Shards) == 1 {
		out.Notes = append(out.Notes, fmt.Sprintf("one store carries %.0f writes/s (%.0f%% of %.0f/s); to split anyway: --etcd-servers-overrides=%s (and likewise %s, %s)",
			sp.TotalWritesPerSec, 100*rest.Utilisation, c,
			StoreOverride("events", StoreEndpoint(in.StoreHost, in.StoreBasePort, "events")),
			StoreOverride("leases", StoreEndpoint(in.StoreHost, in.StoreBasePort, "leases")),
			StoreOverride("pods", StoreEndpoint(in.StoreHost, in.StoreBasePort, "pods"))))
	}

	// --- store groups ---
	var groupFigures []Figure
	if in.StoreReplicas > 1 {
		out.StoreGroup = planStoreGroup(in, *sp)
		var notes []string
		notes, groupFigures = groupNotes(in, out.StoreGroup)
		out.Notes = append(out.Notes, notes...)
	}

	// --- apiserver ---
	ap := &out.APIServer
	ap.Sources = []string{"tuning-guide", "design-5", "k8s-1m", "k8s-apiserver", "k8s-feature-gates"}
	ap.Count = APIServerCount(in.Nodes)
	ap.CountBasis = apiServerCountBasis(in.Nodes)
	ap.ConnsPerAPIServer = ceilDiv(ConnsPerNode*in.Nodes, ap.Count)
	ap.WatchesPerNode = WatchesPerNode
	if in.NodeAgent != nil {
		ap.WatchesPerNode = in.NodeAgent.WatchesPerNode
		ap.Sources = append(ap.Sources, "meganode-bench-nodes")
	}
	ap.WatchesPerAPIServer = int(math.Ceil(ap.WatchesPerNode * n / float64(ap.Count)))
	ap.WritesPerAPIServer = sp.TotalWritesPerSec / float64(ap.Count)
	ap.WatchEventsPerSec = sp.TotalWritesPerSec
	ap.MaxMutatingInflight, ap.MaxRequestsInflight = 200, 400
	if in.Nodes >= 1000 {
		ap.MaxMutatingInflight, ap.MaxRequestsInflight = 3000, 1000
	}
	// Little's law at the 1 s SLO: requests in flight if each took the whole second.
	if need := int(math.Ceil(ap.WritesPerAPIServer)); need > ap.MaxMutatingInflight {
		ap.MaxMutatingInflight = need
	}
	if ap.Count > 1 {
		ap.GoawayChance = 0.001
	}
	ap.MemoryGiB = in.APIServerMemoryGiB
	ap.GOGC = 400
	ap.GOMEMLIMIT = fmt.Sprintf("%dMiB", int(ap.MemoryGiB*1024*0.85))
	if in.KubeMinor < 19 {
		ap.WatchCacheSizes = fmt.Sprintf("nodes#%d,pods#%d,leases.coordination.k8s.io#%d,events#1000,namespaces#500,services#1000",
			max(5000, in.Nodes), max(10000, in.Pods), max(5000, in.Nodes))
	}
	if in.KubeMinor <= 32 {
		ap.FeatureGates = "BtreeWatchCache=false"
	}
	ap.Flags = append(ap.Flags, sp.Flags...)
	ap.Flags = append(ap.Flags,
		fmt.Sprintf("--max-requests-inflight=%d", ap.MaxRequestsInflight),
		fmt.Sprintf("--max-mutating-requests-inflight=%d", ap.MaxMutatingInflight),
		"--watch-cache=true",
	)
	if ap.WatchCacheSizes != "" {
		ap.Flags = append(ap.Flags, "--watch-cache-sizes="+ap.WatchCacheSizes)
	}
	if ap.GoawayChance > 0 {
		ap.Flags = append(ap.Flags, fmt.Sprintf("--goaway-chance=%g", ap.GoawayChance))
	}
	if ap.FeatureGates != "" {
		ap.Flags = append(ap.Flags, "--feature-gates="+ap.FeatureGates)
	}
	ap.Env = []string{fmt.Sprintf("GOGC=%d", ap.GOGC), "GOMEMLIMIT=" + ap.GOMEMLIMIT}
	if in.KubeMinor >= 33 && sp.LeaseWritesPerSec > BTreeWatchCacheUpdatesPerSec {
		out.Problems = append(out.Problems, fmt.Sprintf("watch cache: %.0f lease updates/s exceed the ~%d/s the B-tree watch cache reached (design §5), and BtreeWatchCache is locked on since Kubernetes 1.33 (the 1M-node run used the hash map): lengthen the lease interval (nodeLeaseDurationSeconds ≥ %d) or run ≤ 1.32 with --feature-gates=BtreeWatchCache=false",
			sp.LeaseWritesPerSec, BTreeWatchCacheUpdatesPerSec, int(4*math.Ceil(n/BTreeWatchCacheUpdatesPerSec))))
	}
	if in.KubeMinor >= 19 {
		out.Notes = append(out.Notes, "--watch-cache-sizes: since dynamic watch-cache sizing only 0 (disable) is meaningful, so no sizes are given; the tuning guide's node#5000,pod#10000,... applied to older apiservers")
	}

	// --- controller-manager ---
	cm := &out.ControllerManager
	cm.Sources = []string{"tuning-guide", "k8s-controller-manager"}
	cm.KubeAPIQPS = max(500, int(math.Ceil(2*in.PodsPerSecond)))
	cm.KubeAPIBurst = 2 * cm.KubeAPIQPS
	cm.Flags = []string{fmt.Sprintf("--kube-api-qps=%d", cm.KubeAPIQPS), fmt.Sprintf("--kube-api-burst=%d", cm.KubeAPIBurst)}
	if in.Nodes >= 1000 {
		cm.Flags = append(cm.Flags,
			"--concurrent-deployment-syncs=50", "--concurrent-replicaset-syncs=50", "--concurrent-endpoint-syncs=50",
			"--concurrent-job-syncs=50", "--concurrent-namespace-syncs=100", "--concurrent-service-syncs=100")
	}
	if in.LeaseDurationSeconds != DefaultLeaseDurationSeconds {
		cm.Flags = append(cm.Flags, fmt.Sprintf("--node-monitor-grace-period=%ds", in.LeaseDurationSeconds+10))
	}

	// --- kubelet and kube-proxy ---
	kp := &out.Kubelet
	kp.Sources = []string{"k8s-kubelet", "pods-per-node", "design-6", "kernel-bridge", "tuning-guide", "k8s-kube-proxy", "k8s-nftables"}
	kp.NodeStatusUpdateFrequency = "10s"
	kp.NodeLeaseDurationSeconds = in.LeaseDurationSeconds
	kp.LeaseRenewSeconds = sp.LeaseRenewSeconds
	kp.KubeAPIQPS, kp.KubeAPIBurst = 50, 100
	kp.PodsPerNodeNeeded = ceilDiv(in.Pods, in.Nodes)
	kp.MaxPodsGuideline = MaxPodsGuideline(in.CoresPerNode)
	kp.BridgePortLimit = in.BridgePorts
	kp.MaxPods = kp.MaxPodsGuideline
	kp.MaxPodsBasis = fmt.Sprintf("guideline min(110, 10 × %s cores) = %d", coresText(in.CoresPerNode), kp.MaxPodsGuideline)
	if kp.PodsPerNodeNeeded > kp.MaxPods {
		kp.MaxPods = min(kp.PodsPerNodeNeeded, kp.BridgePortLimit)
		kp.MaxPodsBasis = fmt.Sprintf("%d pods / %d nodes needs %d per node, above the guideline %d; raise the neighbour tables (doctor host --role node --pods-per-node %d)",
			in.Pods, in.Nodes, kp.PodsPerNodeNeeded, kp.MaxPodsGuideline, kp.MaxPods)
	}
	if kp.PodsPerNodeNeeded > kp.BridgePortLimit {
		out.Problems = append(out.Problems, fmt.Sprintf("pods per node: %d needed > %d bridge ports (BR_PORT_BITS=10): with a bridge CNI no maxPods helps; add nodes or use a CNI without a bridge", kp.PodsPerNodeNeeded, kp.BridgePortLimit))
	}
	kp.KubeProxyMode = "nftables"
	kp.ConntrackMaxPerCore = 32768
	kp.Flags = []string{
		"--node-status-update-frequency=" + kp.NodeStatusUpdateFrequency,
		fmt.Sprintf("--max-pods=%d", kp.MaxPods),
		fmt.Sprintf("--kube-api-qps=%d", kp.KubeAPIQPS),
		fmt.Sprintf("--kube-api-burst=%d", kp.KubeAPIBurst),
	}
	if in.LeaseDurationSeconds != DefaultLeaseDurationSeconds {
		out.Notes = append(out.Notes, fmt.Sprintf("kubelet: nodeLeaseDurationSeconds: %d is a config-file field (no flag); KWOK: --node-lease-duration-seconds=%d", in.LeaseDurationSeconds, in.LeaseDurationSeconds))
	}

	// --- scheduler ---
	sc := &out.Scheduler
	sc.Sources = []string{"scheduler-simulate", "design-4", "tuning-guide", "k8s-scheduler"}
	sc.Fanout = SchedulerFanout
	sc.Source = in.SimSource
	if z, err := SizeScheduler(in.SimProjections, in.Nodes, in.Pods, in.ScheduleSeconds); err != nil {
		out.Problems = append(out.Problems, "scheduler: "+err.Error()+" ("+in.SimSource+")")
		sc.Shards = 1
	} else {
		sc.Shards, sc.Cores, sc.Seconds, sc.Basis = z.Shards, z.Cores, z.Seconds, z.Basis
		// Collectors scale with the shards, as the cores do.
		sc.Scatter, sc.ParallelPods = min(z.From.D, z.Shards), z.From.K
		sc.Collectors = max(1, int(math.Ceil(float64(z.From.Collectors)*float64(z.Shards)/float64(z.From.Shards))))
	}
	sc.RelayLevels = RelayTree(sc.Shards, sc.Fanout)
	for _, l := range sc.RelayLevels {
		sc.Relays += l
	}
	if sc.Shards == 1 {
		sc.Basis += "; one stock kube-scheduler suffices"
	}
	perShard := in.PodsPerSecond / float64(sc.Shards)
	sc.KubeAPIQPS = max(500, int(math.Ceil(2*perShard)))
	sc.KubeAPIBurst = 2 * sc.KubeAPIQPS
	sc.GOGC = 800
	sc.GOMEMLIMIT = "90% of the shard's memory limit"
	sc.Flags = []string{fmt.Sprintf("--kube-api-qps=%d", sc.KubeAPIQPS), fmt.Sprintf("--kube-api-burst=%d", sc.KubeAPIBurst)}
	if sc.Shards > 1 {
		sc.Flags = append(sc.Flags, fmt.Sprintf("--shards=%d", sc.Shards), fmt.Sprintf("--scatter=%d", sc.Scatter),
			fmt.Sprintf("--parallel-pods=%d", sc.ParallelPods), fmt.Sprintf("--collectors=%d", sc.Collectors))
	}

	// --- addresses ---
	out.Addresses = planAddresses(in, kp.MaxPods, kp.PodsPerNodeNeeded)

	out.Figures = []Figure{
		{"store capacity (store shards, lease fit, inflight)", fmt.Sprintf("%.0f writes/s per store", c), in.StoreSource},
		{"scheduler (shards, cores, shape, estimate, relays)", fmt.Sprintf("%d shards, %d cores, %.1f s for %d pods", sc.Shards, sc.Cores, sc.Seconds, in.Pods), in.SimSource},
		{"apiserver count", fmt.Sprint(ap.Count), "not measured here: " + ap.CountBasis},
	}
	if a := in.NodeAgent; a != nil {
		out.Figures = append(out.Figures, Figure{"node agent: kubelet (store loads events, pods, rest; watches per apiserver)", a.Text(), a.Source})
	}
	out.Figures = append(out.Figures, groupFigures...)
	return out
}

func coresText(c int) string {
	if c <= 0 {
		return "? (unknown: pass --cores)"
	}
	return fmt.Sprint(c)
}

func sortLoads(ls []WriteLoad) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].WritesPerSec > ls[j-1].WritesPerSec; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// IPv6Providers are the per-node prefixes the k8s-1m article met.
var IPv6Providers = []struct {
	Len      int
	Provider string
}{{64, "Vultr (per VM)"}, {80, "AWS (prefix delegation)"}, {96, "GCP (per VM)"}}

func planAddresses(in PlanInput, maxPods, needed int) AddressPlan {
	ap := AddressPlan{Sources: []string{"design-6", "k8s-1m", "kernel-bridge", "k8s-node-ipam"}}
	nodes := uint64(in.Nodes)
	v4 := netip.MustParsePrefix(in.PodCIDRv4).Masked()
	share := PerNodeShare(v4, nodes)
	pods := PodAddrsPerNode(v4, nodes)
	p4 := IPv4Plan{CIDR: v4.String(), PerNodeShare: share.String(), PodAddrsPerNode: pods.String()}
	if l, err := NodePrefixLen(v4, nodes); err == nil {
		// The longest aligned block per node: /(cluster + ceil(log2 nodes)).
		p4.NodePrefix = fmt.Sprintf("/%d", l)
		p4.HostLocalUsable = HostLocalUsable(32, l).String()
		p4.NodeIPAM = NodeIPAMFits(v4.Bits(), l)
	}
	p4.Enough = pods.Cmp(big.NewInt(int64(needed))) >= 0 && needed > 0
	p4.Note = fmt.Sprintf("%s over %d nodes: %s addresses each, %s for pods after the node's own", v4, in.Nodes, share, pods)
	if p4.NodePrefix != "" {
		p4.Note += fmt.Sprintf("; aligned %s blocks leave %s for host-local IPAM (minus network, broadcast, gateway)", p4.NodePrefix, p4.HostLocalUsable)
	}
	if !p4.NodeIPAM && p4.NodePrefix != "" {
		p4.Note += "; kube-controller-manager --allocate-node-cidrs cannot split it (node mask ≤ cluster mask + 16): assign node ranges outside it"
	}
	ap.IPv4 = p4

	for _, pr := range IPv6Providers {
		addrs := AddrCount(128, pr.Len)
		byAddr := new(big.Int).Sub(addrs, big.NewInt(1)) // the node keeps one
		eff := in.BridgePorts
		if maxPods < eff {
			eff = maxPods
		}
		if byAddr.Cmp(big.NewInt(int64(eff))) < 0 {
			eff = int(byAddr.Int64())
		}
		o := IPv6Option{NodePrefix: fmt.Sprintf("/%d", pr.Len), Provider: pr.Provider,
			AddrsPerNode: Human(addrs), PodsByAddress: Human(byAddr), PodsPerNode: eff}
		if cl, err := ClusterPrefixLen(pr.Len, nodes); err == nil {
			o.ClusterPrefix = fmt.Sprintf("/%d", cl)
			o.NodeIPAM = NodeIPAMFits(cl, pr.Len)
			ula := netip.PrefixFrom(netip.MustParseAddr("fd00::"), cl)
			if last, err := NthSubnet(ula, pr.Len, new(big.Int).SetUint64(nodes-1)); err == nil {
				o.ExampleLast = last.String()
			}
			if o.NodeIPAM {
				o.ClusterCIDRArg = fmt.Sprintf("--cluster-cidr=%s --node-cidr-mask-size-ipv6=%d", ula, pr.Len)
			} else {
				o.ClusterCIDRArg = fmt.Sprintf("provider-assigned per-node /%d, host-local IPAM (kcm node IPAM holds ≤ 65536 node CIDRs)", pr.Len)
			}
		}
		ap.IPv6 = append(ap.IPv6, o)
	}
	ap.Note = "IPv6: every node gets a prefix and each pod a global address from it, all pod interfaces on one bridge, host-local IPAM; pods per node is then bounded by the bridge (" +
		fmt.Sprint(in.BridgePorts) + " ports) and maxPods, not by addresses"
	if !p4.Enough {
		ap.Note = "IPv4 is not enough: " + ap.Note
	}
	return ap
}

// FlagsText renders the plan as flags ready to paste, one component per block.
func (p PlanOutput) FlagsText() string {
	var b strings.Builder
	sec := func(title string, lines []string) {
		fmt.Fprintf(&b, "# %s\n", title)
		for _, l := range lines {
			fmt.Fprintln(&b, l)
		}
		b.WriteString("\n")
	}
	sec(fmt.Sprintf("kube-apiserver (× %d)", p.APIServer.Count), p.APIServer.Flags)
	sec("kube-apiserver environment", p.APIServer.Env)
	sec("kube-controller-manager", p.ControllerManager.Flags)
	sec("kubelet", p.Kubelet.Flags)
	sec("kube-proxy", []string{"--proxy-mode=" + p.Kubelet.KubeProxyMode, fmt.Sprintf("--conntrack-max-per-core=%d", p.Kubelet.ConntrackMaxPerCore)})
	title := "kube-scheduler"
	if p.Scheduler.Shards > 1 {
		title = fmt.Sprintf("scheduler shards (× %d, %d relays, fanout %d)", p.Scheduler.Shards, p.Scheduler.Relays, p.Scheduler.Fanout)
	}
	sec(title, append(append([]string{}, p.Scheduler.Flags...), fmt.Sprintf("# env: GOGC=%d, GOMEMLIMIT=%s", p.Scheduler.GOGC, p.Scheduler.GOMEMLIMIT)))
	return strings.TrimRight(b.String(), "\n") + "\n"
}
