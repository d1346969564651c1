package doctor

import (
	"fmt"
	"strconv"
	"strings"
)

// Role is what a host is for.
type Role string

const (
	RoleControlPlane Role = "control-plane" // kube-apiserver, controller-manager, scheduler
	RoleStore        Role = "store"         // meganode-store or etcd
	RoleNode         Role = "node"          // kubelet, kube-proxy, pods
)

// ParseRole accepts the --role values.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleControlPlane, RoleStore, RoleNode:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want control-plane, store or node)", s)
}

// Status of one check.
type Status string

const (
	StatusOK   Status = "ok"
	StatusWarn Status = "warn" // below the recommendation; works now, will not at the stated scale
	StatusFail Status = "fail" // will break at the stated scale
	StatusSkip Status = "skip" // not applicable or not measurable here
)

// Problem reports whether the status counts as a problem (exit code 1).
func (s Status) Problem() bool { return s == StatusWarn || s == StatusFail }

// Params describe what the host is meant to carry.
type Params struct {
	Role        Role
	PodsPerNode int // pods this node runs (role node)
	Nodes       int // nodes in the cluster
	APIServers  int // 0: as the plan sizes it for Nodes
	CPUs        int // 0: the host's online CPUs
}

// DefaultParams are the flag defaults of `doctor host`.
func DefaultParams() Params {
	return Params{Role: RoleNode, PodsPerNode: 110, Nodes: 5000}
}

// SysctlFix is what --fix writes for a failing sysctl check.
type SysctlFix struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Optional keys are written with a leading '-' so that applying the
	// drop-in does not fail when the key does not exist (module not loaded).
	Optional bool `json:"optional,omitempty"`
}

// Check is the outcome of one rule on one host.
type Check struct {
	ID          string     `json:"id"`
	Title       string     `json:"title"`
	Current     string     `json:"current"`
	Recommended string     `json:"recommended"`
	Status      Status     `json:"status"`
	Why         string     `json:"why"`
	Sources     []Source   `json:"sources"`
	Fix         *SysctlFix `json:"fix,omitempty"`
	Advice      string     `json:"advice,omitempty"` // what to do when no sysctl fixes it
}

// Rule is one row of the rules table.
type Rule struct {
	ID      string
	Title   string
	Roles   []Role
	Sources []string
	Eval    func(f *Facts, p Params) Check
}

// AppliesTo reports whether the rule is checked for role r.
func (r Rule) AppliesTo(role Role) bool {
	for _, x := range r.Roles {
		if x == role {
			return true
		}
	}
	return false
}

var allRoles = []Role{RoleControlPlane, RoleStore, RoleNode}

// ConnsPerNode is how many long-lived connections each node keeps to the
// apiservers: the kubelet's and kube-proxy's (issue 7: "≥ 1–2 per node"; design
// §5: "≥ 1 connection per kubelet").
const ConnsPerNode = 2

// Derived sizes shared by several rules.

func (p Params) apiservers() int {
	if p.APIServers > 0 {
		return p.APIServers
	}
	return APIServerCount(p.Nodes)
}

func (p Params) cpus(f *Facts) int {
	if p.CPUs > 0 {
		return p.CPUs
	}
	if f.CPUs > 0 {
		return f.CPUs
	}
	return 1
}

// ConnsPerAPIServer is how many client connections each apiserver holds.
func (p Params) ConnsPerAPIServer() int {
	a := p.apiservers()
	return ceilDiv(ConnsPerNode*p.Nodes, a)
}

// NeighEntries is the neighbour-table size a node needs: one entry per pod on
// its bridge plus 64 for its own peers (gateway, other hosts on its segment).
func NeighEntries(podsPerNode int) int { return podsPerNode + 64 }

// NeighThresholds scales the kernel defaults (128/512/1024, ratio 1:4:8) so that
// gc_thresh2, the level above which entries are collected after 5 s, is at least
// twice the entries the node needs. For 1,024 pods it gives 1024/4096/8192, the
// article's values for thresh2/thresh3.
func NeighThresholds(podsPerNode int) (t1, t2, t3 uint64) {
	t2 = nextPow2(uint64(2 * NeighEntries(podsPerNode)))
	if t2 < 512 {
		t2 = 512
	}
	return t2 / 4, t2, 2 * t2
}

// ConntrackMaxKubeProxy is what kube-proxy sets by default on a host with cpus
// CPUs: max(32768 × cpus, 131072).
func ConntrackMaxKubeProxy(cpus int) uint64 {
	v := uint64(32768 * cpus)
	if v < 131072 {
		v = 131072
	}
	return v
}

// ConntrackMax is the recommended nf_conntrack_max for a role: kube-proxy's
// per-core sizing, and on control-plane hosts at least two entries per client
// connection of the local apiserver (one per connection, doubled for churn).
func ConntrackMax(f *Facts, p Params) uint64 {
	v := ConntrackMaxKubeProxy(p.cpus(f))
	if p.Role == RoleControlPlane {
		if c := roundUp(uint64(2*p.ConnsPerAPIServer()), 65536); c > v {
			v = c
		}
	}
	return v
}

// NoFileNeed is the open-file limit a role's main process needs.
//   - control-plane: one fd per client connection of the apiserver plus 4096 for
//     store connections, watches' files and logs; at least 65536.
//   - node: 64 fds per pod for kubelet/containerd bookkeeping (logs, pipes,
//     sockets, inotify) plus 4096; at least 65536.
//   - store: 65536 (a few apiservers connect; per-prefix log files).
//
// The result is rounded up to a power of two.
func NoFileNeed(p Params) (need, rec uint64) {
	switch p.Role {
	case RoleControlPlane:
		need = uint64(p.ConnsPerAPIServer() + 4096)
	case RoleNode:
		need = uint64(64*p.PodsPerNode + 4096)
	default:
		need = 4096
	}
	rec = nextPow2(need)
	if rec < 65536 {
		rec = 65536
	}
	return need, rec
}

// PidNeed is the number of tasks (processes + threads) a node needs: 128 per pod
// (pause, the app and its threads) plus 8192 for the system.
func PidNeed(podsPerNode int) (need, rec uint64) {
	need = uint64(128*podsPerNode + 8192)
	rec = nextPow2(need)
	if rec < 32768 {
		rec = 32768
	}
	if rec > 4194304 {
		rec = 4194304
	}
	return need, rec
}

// BacklogRec is the accept-queue length for the role's servers: on control-plane
// hosts every client of an apiserver may reconnect at once (restart, GOAWAY,
// load-balancer failover), capped at 65535; elsewhere the kernel default 4096.
func BacklogRec(p Params) uint64 {
	if p.Role != RoleControlPlane {
		return 4096
	}
	v := nextPow2(uint64(p.ConnsPerAPIServer()))
	if v < 4096 {
		v = 4096
	}
	if v > 65535 {
		v = 65535
	}
	return v
}

// Rules is the table of host checks.
var Rules = buildRules()

func buildRules() []Rule {
	var rs []Rule
	for _, fam := range []string{"ipv4", "ipv6"} {
		for n := 1; n <= 3; n++ {
			rs = append(rs, neighRule(fam, n))
		}
	}
	rs = append(rs,
		Rule{ID: "net.netfilter.nf_conntrack_max", Title: "conntrack table size",
			Roles: []Role{RoleNode, RoleControlPlane}, Sources: []string{"k8s-kube-proxy", "tuning-guide", "design-6", "kernel-conntrack"},
			Eval: evalConntrackMax},
		Rule{ID: "net.netfilter.nf_conntrack_buckets", Title: "conntrack hash size",
			Roles: []Role{RoleNode, RoleControlPlane}, Sources: []string{"k8s-kube-proxy", "kernel-conntrack"},
			Eval: evalConntrackBuckets},
		Rule{ID: "rlimit.nofile", Title: "open-file limit (RLIMIT_NOFILE)",
			Roles: allRoles, Sources: []string{"design-5", "assumption"},
			Eval: evalNoFile},
		Rule{ID: "fs.nr_open", Title: "ceiling for RLIMIT_NOFILE",
			Roles: allRoles, Sources: []string{"kernel-sysctl"},
			Eval: evalNrOpen},
		Rule{ID: "fs.file-max", Title: "system-wide open files",
			Roles: allRoles, Sources: []string{"kernel-sysctl", "assumption"},
			Eval: evalFileMax},
		Rule{ID: "kernel.pid_max", Title: "process/thread ids",
			Roles: []Role{RoleNode}, Sources: []string{"kernel-sysctl", "pods-per-node", "assumption"},
			Eval: evalPidMax},
		Rule{ID: "rlimit.nproc", Title: "process limit (RLIMIT_NPROC)",
			Roles: []Role{RoleNode}, Sources: []string{"kernel-sysctl", "assumption"},
			Eval: evalNProc},
		Rule{ID: "net.core.somaxconn", Title: "accept queue of Go servers",
			Roles: []Role{RoleControlPlane, RoleStore}, Sources: []string{"go-backlog", "kernel-sysctl", "design-5"},
			Eval: evalBacklog("net.core.somaxconn")},
		Rule{ID: "net.ipv4.tcp_max_syn_backlog", Title: "half-open connection queue",
			Roles: []Role{RoleControlPlane}, Sources: []string{"kernel-sysctl", "design-5"},
			Eval: evalBacklog("net.ipv4.tcp_max_syn_backlog")},
		Rule{ID: "net.ipv4.ip_local_port_range", Title: "ephemeral port range",
			Roles: allRoles, Sources: []string{"kernel-sysctl", "k8s-nodeport"},
			Eval: evalPortRange},
		Rule{ID: "kernel.version", Title: "kernel for nftables kube-proxy",
			Roles: []Role{RoleNode, RoleControlPlane}, Sources: []string{"k8s-nftables", "pods-per-node", "design-6", "tuning-guide"},
			Eval: evalKernel},
		Rule{ID: "disk.fsync", Title: "fsync latency of the store data directory",
			Roles: []Role{RoleStore}, Sources: []string{"etcd-disk", "k8s-1m"},
			Eval: evalFsync},
	)
	return rs
}

// Evaluate runs every rule that applies to p.Role.
func Evaluate(f *Facts, p Params) []Check {
	var out []Check
	for _, r := range Rules {
		if !r.AppliesTo(p.Role) {
			continue
		}
		c := r.Eval(f, p)
		c.ID, c.Title, c.Sources = r.ID, r.Title, SourceList(r.Sources...)
		out = append(out, c)
	}
	return out
}

// RuleByID finds a rule.
func RuleByID(id string) (Rule, bool) {
	for _, r := range Rules {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

func skip(cur, why string) Check {
	return Check{Current: cur, Recommended: "-", Status: StatusSkip, Why: why}
}

func neighRule(fam string, n int) Rule {
	key := fmt.Sprintf("net.%s.neigh.default.gc_thresh%d", fam, n)
	return Rule{
		ID: key, Title: fmt.Sprintf("%s neighbour table gc_thresh%d", fam, n),
		Roles: []Role{RoleNode}, Sources: []string{"pods-per-node", "design-6", "kernel-neigh"},
		Eval: func(f *Facts, p Params) Check {
			cur, ok := f.sysctlUint(key)
			if !ok {
				return skip("absent", fam+" neighbour table not present (IPv6 disabled?)")
			}
			t := [4]uint64{}
			t[1], t[2], t[3] = NeighThresholds(p.PodsPerNode)
			rec := t[n]
			need := uint64(NeighEntries(p.PodsPerNode))
			c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10)}
			what := map[int]string{
				1: "below gc_thresh1 the garbage collector leaves entries alone",
				2: "above gc_thresh2 entries older than 5 s are collected: pods lose their neighbour entry ('no route to host', seen above ~500 pods)",
				3: "gc_thresh3 is the hard maximum: above it 'neighbor table overflow'",
			}[n]
			c.Why = fmt.Sprintf("%d pods/node on one bridge need ~%d entries (pods + 64 host peers); %s; recommended keeps the kernel's 1:4:8 ratio with gc_thresh2 ≥ 2× entries (%d/%d/%d)",
				p.PodsPerNode, need, what, t[1], t[2], t[3])
			switch {
			case cur >= rec:
				c.Status = StatusOK
			case n > 1 && cur < need:
				c.Status = StatusFail
			default:
				c.Status = StatusWarn
			}
			if c.Status != StatusOK {
				c.Fix = &SysctlFix{Key: key, Value: strconv.FormatUint(rec, 10)}
			}
			return c
		},
	}
}

func evalConntrackMax(f *Facts, p Params) Check {
	cur, ok := f.sysctlUint("net.netfilter.nf_conntrack_max")
	if !ok {
		return skip("not loaded", "nf_conntrack is not loaded: no table to overflow yet (kube-proxy loads and sizes it at start)")
	}
	rec := ConntrackMax(f, p)
	c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10)}
	cpus := p.cpus(f)
	c.Why = fmt.Sprintf("kube-proxy sizes it per core: max(32768 × %d CPUs, 131072) = %d (the tuning guide uses 144420 per core)", cpus, ConntrackMaxKubeProxy(cpus))
	if p.Role == RoleControlPlane {
		c.Why += fmt.Sprintf("; a control-plane host also tracks ~%d client connections per apiserver (%d nodes × %d / %d apiservers), doubled for churn",
			p.ConnsPerAPIServer(), p.Nodes, ConnsPerNode, p.apiservers())
	}
	switch {
	case cur >= rec:
		c.Status = StatusOK
	case p.Role == RoleControlPlane && cur < uint64(p.ConnsPerAPIServer()):
		c.Status = StatusFail
	default:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Fix = &SysctlFix{Key: "net.netfilter.nf_conntrack_max", Value: strconv.FormatUint(rec, 10), Optional: true}
	}
	return c
}

func evalConntrackBuckets(f *Facts, p Params) Check {
	cur, ok := f.sysctlUint("net.netfilter.nf_conntrack_buckets")
	if !ok {
		return skip("not loaded", "nf_conntrack is not loaded")
	}
	rec := ConntrackMax(f, p) / 4
	c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10),
		Why: "kube-proxy sets the hash size to nf_conntrack_max / 4 so chains stay short (4 entries per bucket)"}
	c.Status = StatusOK
	if cur < rec {
		c.Status = StatusWarn
		c.Fix = &SysctlFix{Key: "net.netfilter.nf_conntrack_buckets", Value: strconv.FormatUint(rec, 10), Optional: true}
	}
	return c
}

func limitWho(f *Facts) string {
	if f.LimitsPID > 0 {
		return fmt.Sprintf("pid %d", f.LimitsPID)
	}
	return "this shell (services get theirs from their unit: LimitNOFILE=/LimitNPROC=)"
}

func evalNoFile(f *Facts, p Params) Check {
	if f.NoFile == nil {
		return skip("unknown", "/proc/<pid>/limits not readable")
	}
	need, rec := NoFileNeed(p)
	c := Check{Current: f.NoFile.String(), Recommended: "soft ≥ " + strconv.FormatUint(rec, 10)}
	switch p.Role {
	case RoleControlPlane:
		c.Why = fmt.Sprintf("each apiserver holds ~%d client connections (%d nodes × %d connections / %d apiservers) + 4096 for store, logs and files; limit of %s",
			p.ConnsPerAPIServer(), p.Nodes, ConnsPerNode, p.apiservers(), limitWho(f))
	case RoleNode:
		c.Why = fmt.Sprintf("%d pods × 64 fds (logs, pipes, sockets, inotify in kubelet/containerd) + 4096; limit of %s", p.PodsPerNode, limitWho(f))
	default:
		c.Why = "the store serves a few apiservers and keeps one log file per prefix; 65536 leaves room; limit of " + limitWho(f)
	}
	switch {
	case f.NoFile.Soft >= rec:
		c.Status = StatusOK
	case f.NoFile.Soft < need:
		c.Status = StatusFail
	default:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Advice = fmt.Sprintf("set LimitNOFILE=%d in the service's systemd unit (or `ulimit -n %d` before starting it)", rec, rec)
	}
	return c
}

func evalNrOpen(f *Facts, p Params) Check {
	cur, ok := f.sysctlUint("fs.nr_open")
	if !ok {
		return skip("absent", "fs.nr_open not readable")
	}
	_, nofile := NoFileNeed(p)
	rec := nofile
	if rec < 1048576 {
		rec = 1048576
	}
	c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10),
		Why: fmt.Sprintf("no process can raise RLIMIT_NOFILE above fs.nr_open; the role needs %d (kernel default 1048576)", nofile)}
	switch {
	case cur >= rec:
		c.Status = StatusOK
	case cur < nofile:
		c.Status = StatusFail
	default:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Fix = &SysctlFix{Key: "fs.nr_open", Value: strconv.FormatUint(rec, 10)}
	}
	return c
}

func evalFileMax(f *Facts, p Params) Check {
	cur, ok := f.sysctlUint("fs.file-max")
	if !ok {
		return skip("absent", "fs.file-max not readable")
	}
	_, nofile := NoFileNeed(p)
	rec := 4 * nofile
	c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10),
		Why: fmt.Sprintf("system-wide file handles: room for 4 processes at the role's %d-file limit (main server, runtime, agents)", nofile)}
	c.Status = StatusOK
	if cur < rec {
		c.Status = StatusWarn
		if cur < nofile {
			c.Status = StatusFail
		}
		c.Fix = &SysctlFix{Key: "fs.file-max", Value: strconv.FormatUint(rec, 10)}
	}
	return c
}

func evalPidMax(f *Facts, p Params) Check {
	cur, ok := f.sysctlUint("kernel.pid_max")
	if !ok {
		return skip("absent", "kernel.pid_max not readable")
	}
	need, rec := PidNeed(p.PodsPerNode)
	c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10),
		Why: fmt.Sprintf("%d pods × 128 tasks (pause, app, threads) + 8192 system = %d ids; 4194304 is the 64-bit maximum", p.PodsPerNode, need)}
	switch {
	case cur < need:
		c.Status = StatusFail // also when need exceeds the 64-bit maximum: fewer pods per node
	case cur >= rec:
		c.Status = StatusOK
	default:
		c.Status = StatusWarn
	}
	if cur < rec {
		c.Fix = &SysctlFix{Key: "kernel.pid_max", Value: strconv.FormatUint(rec, 10)}
	}
	return c
}

func evalNProc(f *Facts, p Params) Check {
	if f.NProc == nil {
		return skip("unknown", "/proc/<pid>/limits not readable")
	}
	need, rec := PidNeed(p.PodsPerNode)
	c := Check{Current: f.NProc.String(), Recommended: "soft ≥ " + strconv.FormatUint(rec, 10) + " or unlimited",
		Why: fmt.Sprintf("threads count against RLIMIT_NPROC of their user; %d pods need ~%d tasks; limit of %s", p.PodsPerNode, need, limitWho(f))}
	switch {
	case f.NProc.Soft >= rec:
		c.Status = StatusOK
	case f.NProc.Soft < need:
		c.Status = StatusFail
	default:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Advice = fmt.Sprintf("set LimitNPROC=infinity (or ≥ %d) for kubelet and the container runtime", rec)
	}
	return c
}

func evalBacklog(key string) func(f *Facts, p Params) Check {
	return func(f *Facts, p Params) Check {
		cur, ok := f.sysctlUint(key)
		if !ok {
			return skip("absent", key+" not readable")
		}
		rec := BacklogRec(p)
		c := Check{Current: strconv.FormatUint(cur, 10), Recommended: "≥ " + strconv.FormatUint(rec, 10)}
		if p.Role == RoleControlPlane {
			c.Why = fmt.Sprintf("~%d clients per apiserver may reconnect at once (restart, GOAWAY, failover); Go servers listen with backlog = somaxconn (kernel default 4096, capped here at 65535)", p.ConnsPerAPIServer())
		} else {
			c.Why = "a store has few clients (the apiservers); the kernel default 4096 is enough"
		}
		c.Status = StatusOK
		if cur < rec {
			c.Status = StatusWarn
			c.Fix = &SysctlFix{Key: key, Value: strconv.FormatUint(rec, 10)}
		}
		return c
	}
}

// PortRange parses "lo hi".
func PortRange(s string) (lo, hi int, err error) {
	fs := strings.Fields(s)
	if len(fs) != 2 {
		return 0, 0, fmt.Errorf("port range %q: want two numbers", s)
	}
	if lo, err = strconv.Atoi(fs[0]); err != nil {
		return 0, 0, err
	}
	if hi, err = strconv.Atoi(fs[1]); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("port range %q: hi < lo", s)
	}
	return lo, hi, nil
}

// NodePortRange is Kubernetes' default --service-node-port-range.
const NodePortLo, NodePortHi = 30000, 32767

// DefaultPortRange is the kernel's default ephemeral range (28232 ports).
const DefaultPortRange = "32768 60999"

func evalPortRange(f *Facts, p Params) Check {
	v, ok := f.Sysctl["net.ipv4.ip_local_port_range"]
	if !ok {
		return skip("absent", "ip_local_port_range not readable")
	}
	lo, hi, err := PortRange(v)
	if err != nil {
		return skip(v, err.Error())
	}
	size := hi - lo + 1
	c := Check{Current: fmt.Sprintf("%s (%d ports)", v, size), Recommended: "≥ 28232 ports, outside 30000-32767"}
	overlap := lo <= NodePortHi && hi >= NodePortLo
	var bad []string
	if size < 28232 {
		bad = append(bad, fmt.Sprintf("only %d ports for outgoing connections per destination (kernel default 28232)", size))
	}
	if overlap && p.Role != RoleStore {
		bad = append(bad, "overlaps the NodePort range 30000-32767: an outgoing connection can take a port kube-proxy forwards")
	}
	if len(bad) == 0 {
		c.Status = StatusOK
		c.Why = "outgoing connections (apiserver→store, kubelet→apiserver, SNAT'd pod traffic) have room; NodePorts are not shadowed"
		return c
	}
	c.Status = StatusWarn
	c.Why = strings.Join(bad, "; ")
	c.Fix = &SysctlFix{Key: "net.ipv4.ip_local_port_range", Value: DefaultPortRange}
	return c
}

func evalKernel(f *Facts, p Params) Check {
	maj, mnr, err := KernelVersion(f.KernelRelease)
	if err != nil {
		return skip(f.KernelRelease, err.Error())
	}
	c := Check{Current: f.KernelRelease, Recommended: "≥ 5.13"}
	if maj > 5 || (maj == 5 && mnr >= 13) {
		c.Status = StatusOK
		c.Why = "kube-proxy can run in nftables mode (O(1) service lookup; iptables rule updates take hours at 20K services)"
	} else {
		c.Status = StatusWarn
		c.Why = "nftables kube-proxy needs Linux ≥ 5.13; iptables mode does not scale with services and ipvs was slower than iptables at 1000 pods in the article"
		c.Advice = "upgrade the kernel to ≥ 5.13 to run kube-proxy --proxy-mode=nftables"
	}
	return c
}

// Fsync thresholds (etcd guidance: p99 < 10 ms; OpenShift's check fails > 20 ms).
const (
	FsyncGoodP99 = 10.0 // ms
	FsyncBadP99  = 20.0 // ms
)

func evalFsync(f *Facts, p Params) Check {
	if f.Fsync == nil {
		why := "not measured"
		if f.FsyncErr != "" {
			why = f.FsyncErr
		}
		return skip("not measured", why)
	}
	r := f.Fsync
	c := Check{Current: fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d × %d B fdatasync in %s)", r.P50ms, r.P99ms, r.Maxms, r.Samples, r.BlockSize, r.Dir),
		Recommended: fmt.Sprintf("p99 < %.0f ms", FsyncGoodP99)}
	serial := 0.0
	if r.P50ms > 0 {
		serial = 1000 / r.P50ms
	}
	c.Why = fmt.Sprintf("every durable commit waits for one fsync: one writer commits at most ~%.0f/s (1/p50), more only by group commit; slow fsync stalls leader heartbeats", serial)
	switch {
	case r.P99ms < FsyncGoodP99:
		c.Status = StatusOK
	case r.P99ms <= FsyncBadP99:
		c.Status = StatusWarn
	default:
		c.Status = StatusFail
	}
	if c.Status != StatusOK {
		c.Advice = "put the store's log on a local SSD/NVMe of its own (the tuning guide also separates WAL and snapshots and raises its I/O priority with ionice -c2 -n0); or keep leases and events in memory only (design §3)"
	}
	return c
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func nextPow2(v uint64) uint64 {
	if v <= 1 {
		return 1
	}
	p := uint64(1)
	for p < v {
		p <<= 1
	}
	return p
}

func roundUp(v, m uint64) uint64 {
	if m == 0 {
		return v
	}
	return (v + m - 1) / m * m
}
