package doctor

import (
	"strings"
	"testing"
)

// kernelDefaults is a host as a stock kernel leaves it.
func kernelDefaults() *Facts {
	return &Facts{
		Sysctl: map[string]string{
			"net.ipv4.neigh.default.gc_thresh1":  "128",
			"net.ipv4.neigh.default.gc_thresh2":  "512",
			"net.ipv4.neigh.default.gc_thresh3":  "1024",
			"net.ipv6.neigh.default.gc_thresh1":  "128",
			"net.ipv6.neigh.default.gc_thresh2":  "512",
			"net.ipv6.neigh.default.gc_thresh3":  "1024",
			"net.netfilter.nf_conntrack_max":     "262144",
			"net.netfilter.nf_conntrack_buckets": "65536",
			"net.core.somaxconn":                 "4096",
			"net.ipv4.tcp_max_syn_backlog":       "4096",
			"net.ipv4.ip_local_port_range":       "32768 60999",
			"fs.file-max":                        "9223372036854775807",
			"fs.nr_open":                         "1048576",
			"kernel.pid_max":                     "4194304",
		},
		NoFile:        &Limit{Soft: 1048576, Hard: 1048576},
		NProc:         &Limit{Soft: Unlimited, Hard: Unlimited},
		KernelRelease: "6.1.0-18-amd64",
		CPUs:          2,
	}
}

type ruleCase struct {
	name   string
	rule   string
	params Params
	set    map[string]string // sysctl overrides; "" deletes the key
	edit   func(f *Facts)
	status Status
	rec    string // substring of Recommended
	fix    string // expected fix value; "" = no fix
	fixOpt bool
	whyHas string // substring of Why
}

func node(pods int) Params { return Params{Role: RoleNode, PodsPerNode: pods, Nodes: 5000} }
func cp(nodes int) Params  { return Params{Role: RoleControlPlane, PodsPerNode: 110, Nodes: nodes} }
func store() Params        { return Params{Role: RoleStore, PodsPerNode: 110, Nodes: 5000} }

var ruleCases = []ruleCase{
	// Neighbour tables: entries = pods + 64; gc_thresh2 = nextPow2(2 × entries) ≥ 512; 1:4:8.
	{name: "110 pods fit the kernel defaults", rule: "net.ipv4.neigh.default.gc_thresh1", params: node(110), status: StatusOK, rec: "≥ 128"},
	{name: "110 pods thresh2", rule: "net.ipv4.neigh.default.gc_thresh2", params: node(110), status: StatusOK, rec: "≥ 512"},
	{name: "110 pods thresh3", rule: "net.ipv4.neigh.default.gc_thresh3", params: node(110), status: StatusOK, rec: "≥ 1024"},
	{name: "500 pods: thresh1 below", rule: "net.ipv4.neigh.default.gc_thresh1", params: node(500), status: StatusWarn, rec: "≥ 512", fix: "512"},
	{name: "500 pods: 564 entries > thresh2 512 (article: errors above ~500)", rule: "net.ipv4.neigh.default.gc_thresh2", params: node(500), status: StatusFail, rec: "≥ 2048", fix: "2048", whyHas: "no route to host"},
	{name: "500 pods: thresh3 holds but below rec", rule: "net.ipv4.neigh.default.gc_thresh3", params: node(500), status: StatusWarn, rec: "≥ 4096", fix: "4096"},
	{name: "1024 pods: thresh1 never fails", rule: "net.ipv4.neigh.default.gc_thresh1", params: node(1024), status: StatusWarn, fix: "1024"},
	{name: "1024 pods: thresh2", rule: "net.ipv4.neigh.default.gc_thresh2", params: node(1024), status: StatusFail, fix: "4096"},
	{name: "1024 pods: table overflows", rule: "net.ipv4.neigh.default.gc_thresh3", params: node(1024), status: StatusFail, fix: "8192", whyHas: "neighbor table overflow"},
	{name: "1024 pods with the article's values", rule: "net.ipv4.neigh.default.gc_thresh2", params: node(1024),
		set: map[string]string{"net.ipv4.neigh.default.gc_thresh1": "2048", "net.ipv4.neigh.default.gc_thresh2": "4096", "net.ipv4.neigh.default.gc_thresh3": "8192"}, status: StatusOK},
	{name: "1024 pods article thresh3", rule: "net.ipv4.neigh.default.gc_thresh3", params: node(1024),
		set: map[string]string{"net.ipv4.neigh.default.gc_thresh3": "8192"}, status: StatusOK},
	{name: "ipv6 thresh1 follows pods", rule: "net.ipv6.neigh.default.gc_thresh1", params: node(1024), status: StatusWarn, fix: "1024"},
	{name: "ipv6 thresh2 follows pods", rule: "net.ipv6.neigh.default.gc_thresh2", params: node(1024), status: StatusFail, fix: "4096"},
	{name: "ipv6 thresh3 follows pods", rule: "net.ipv6.neigh.default.gc_thresh3", params: node(700), status: StatusWarn, rec: "≥ 4096", fix: "4096"},
	{name: "ipv6 disabled", rule: "net.ipv6.neigh.default.gc_thresh3", params: node(1024), set: map[string]string{"net.ipv6.neigh.default.gc_thresh3": ""}, status: StatusSkip},

	// conntrack: max(32768 × cpus, 131072); control plane ≥ 2 × connections per apiserver.
	{name: "2 cpus: kube-proxy min 131072", rule: "net.netfilter.nf_conntrack_max", params: node(110), status: StatusOK, rec: "≥ 131072"},
	{name: "16 cpus: 524288", rule: "net.netfilter.nf_conntrack_max", params: Params{Role: RoleNode, PodsPerNode: 110, Nodes: 5000, CPUs: 16}, status: StatusWarn, rec: "≥ 524288", fix: "524288", fixOpt: true},
	{name: "1M nodes / 11 apiservers: 181819 conns", rule: "net.netfilter.nf_conntrack_max", params: cp(1_000_000), set: map[string]string{"net.netfilter.nf_conntrack_max": "131072"}, status: StatusFail, rec: "≥ 393216", fix: "393216", fixOpt: true},
	{name: "control plane at 5000 nodes", rule: "net.netfilter.nf_conntrack_max", params: cp(5000), status: StatusOK, rec: "≥ 131072"},
	{name: "module not loaded", rule: "net.netfilter.nf_conntrack_max", params: node(110), set: map[string]string{"net.netfilter.nf_conntrack_max": ""}, status: StatusSkip},
	{name: "buckets = max/4", rule: "net.netfilter.nf_conntrack_buckets", params: node(110), status: StatusOK, rec: "≥ 32768"},
	{name: "buckets too few", rule: "net.netfilter.nf_conntrack_buckets", params: node(110), set: map[string]string{"net.netfilter.nf_conntrack_buckets": "16384"}, status: StatusWarn, fix: "32768", fixOpt: true},
	{name: "buckets for 1M-node control plane", rule: "net.netfilter.nf_conntrack_buckets", params: cp(1_000_000), status: StatusWarn, fix: "98304", fixOpt: true},
	{name: "buckets absent", rule: "net.netfilter.nf_conntrack_buckets", params: node(110), set: map[string]string{"net.netfilter.nf_conntrack_buckets": ""}, status: StatusSkip},

	// Open files: control plane conns/apiserver + 4096; node 64/pod + 4096; ≥ 65536.
	{name: "node 110 pods, shell 20000", rule: "rlimit.nofile", params: node(110), edit: func(f *Facts) { f.NoFile = &Limit{20000, 20000} }, status: StatusWarn, rec: "soft ≥ 65536"},
	{name: "node 110 pods, 1024 files", rule: "rlimit.nofile", params: node(110), edit: func(f *Facts) { f.NoFile = &Limit{1024, 4096} }, status: StatusFail},
	{name: "node 1024 pods", rule: "rlimit.nofile", params: node(1024), edit: func(f *Facts) { f.NoFile = &Limit{100000, 100000} }, status: StatusWarn, rec: "soft ≥ 131072"},
	{name: "node 1024 pods, 65536 files", rule: "rlimit.nofile", params: node(1024), edit: func(f *Facts) { f.NoFile = &Limit{65536, 65536} }, status: StatusFail},
	{name: "apiserver at 1M nodes", rule: "rlimit.nofile", params: cp(1_000_000), edit: func(f *Facts) { f.NoFile = &Limit{65536, 65536} }, status: StatusFail, rec: "soft ≥ 262144", whyHas: "181819 client connections"},
	{name: "apiserver at 1M nodes, 1M files", rule: "rlimit.nofile", params: cp(1_000_000), status: StatusOK},
	{name: "apiserver with 100 apiservers", rule: "rlimit.nofile", params: Params{Role: RoleControlPlane, Nodes: 1_000_000, APIServers: 100}, edit: func(f *Facts) { f.NoFile = &Limit{65536, 65536} }, status: StatusOK},
	{name: "store", rule: "rlimit.nofile", params: store(), edit: func(f *Facts) { f.NoFile = &Limit{65536, 65536} }, status: StatusOK},
	{name: "limits unreadable", rule: "rlimit.nofile", params: store(), edit: func(f *Facts) { f.NoFile = nil }, status: StatusSkip},
	{name: "nr_open default", rule: "fs.nr_open", params: cp(1_000_000), status: StatusOK, rec: "≥ 1048576"},
	{name: "nr_open below the role's limit", rule: "fs.nr_open", params: cp(1_000_000), set: map[string]string{"fs.nr_open": "131072"}, status: StatusFail, fix: "1048576"},
	{name: "nr_open above need, below default", rule: "fs.nr_open", params: cp(1_000_000), set: map[string]string{"fs.nr_open": "524288"}, status: StatusWarn, fix: "1048576"},
	{name: "file-max huge", rule: "fs.file-max", params: node(110), status: StatusOK, rec: "≥ 262144"},
	{name: "file-max small", rule: "fs.file-max", params: node(110), set: map[string]string{"fs.file-max": "100000"}, status: StatusWarn, fix: "262144"},
	{name: "file-max tiny", rule: "fs.file-max", params: node(110), set: map[string]string{"fs.file-max": "50000"}, status: StatusFail, fix: "262144"},
	{name: "file-max for 1M-node apiserver", rule: "fs.file-max", params: cp(1_000_000), set: map[string]string{"fs.file-max": "1000000"}, status: StatusWarn, fix: "1048576"},

	// Tasks: 128 per pod + 8192.
	{name: "pid_max 32768 holds 110 pods", rule: "kernel.pid_max", params: node(110), set: map[string]string{"kernel.pid_max": "32768"}, status: StatusOK, rec: "≥ 32768"},
	{name: "pid_max 32768 for 1024 pods", rule: "kernel.pid_max", params: node(1024), set: map[string]string{"kernel.pid_max": "32768"}, status: StatusFail, rec: "≥ 262144", fix: "262144"},
	{name: "pid_max enough but below rec", rule: "kernel.pid_max", params: node(1024), set: map[string]string{"kernel.pid_max": "200000"}, status: StatusWarn, fix: "262144"},
	{name: "pid_max at most 4194304", rule: "kernel.pid_max", params: node(100000), status: StatusFail, rec: "≥ 4194304"},
	{name: "nproc unlimited", rule: "rlimit.nproc", params: node(1024), status: StatusOK},
	{name: "nproc 1000", rule: "rlimit.nproc", params: node(110), edit: func(f *Facts) { f.NProc = &Limit{1000, 1000} }, status: StatusFail},
	{name: "nproc 30000 for 110 pods", rule: "rlimit.nproc", params: node(110), edit: func(f *Facts) { f.NProc = &Limit{30000, 30000} }, status: StatusWarn, rec: "soft ≥ 32768"},

	// Accept queues.
	{name: "somaxconn at 1M nodes", rule: "net.core.somaxconn", params: cp(1_000_000), status: StatusWarn, rec: "≥ 65535", fix: "65535"},
	{name: "somaxconn at 1000 nodes", rule: "net.core.somaxconn", params: cp(1000), status: StatusOK, rec: "≥ 4096"},
	{name: "somaxconn at 50000 nodes", rule: "net.core.somaxconn", params: cp(50_000), status: StatusWarn, rec: "≥ 16384", fix: "16384"},
	{name: "somaxconn old default on a store", rule: "net.core.somaxconn", params: store(), set: map[string]string{"net.core.somaxconn": "128"}, status: StatusWarn, fix: "4096"},
	{name: "syn backlog at 1M nodes", rule: "net.ipv4.tcp_max_syn_backlog", params: cp(1_000_000), status: StatusWarn, fix: "65535"},
	{name: "syn backlog raised", rule: "net.ipv4.tcp_max_syn_backlog", params: cp(1_000_000), set: map[string]string{"net.ipv4.tcp_max_syn_backlog": "65535"}, status: StatusOK},

	// Ephemeral ports.
	{name: "kernel default range", rule: "net.ipv4.ip_local_port_range", params: node(110), status: StatusOK},
	{name: "wide range shadows NodePorts", rule: "net.ipv4.ip_local_port_range", params: node(110), set: map[string]string{"net.ipv4.ip_local_port_range": "1024 65535"}, status: StatusWarn, fix: DefaultPortRange, whyHas: "NodePort"},
	{name: "wide range on a store host is fine", rule: "net.ipv4.ip_local_port_range", params: store(), set: map[string]string{"net.ipv4.ip_local_port_range": "1024 65535"}, status: StatusOK},
	{name: "narrow range", rule: "net.ipv4.ip_local_port_range", params: store(), set: map[string]string{"net.ipv4.ip_local_port_range": "50000 60999"}, status: StatusWarn, fix: DefaultPortRange, whyHas: "11000 ports"},
	{name: "unparsable range", rule: "net.ipv4.ip_local_port_range", params: store(), set: map[string]string{"net.ipv4.ip_local_port_range": "60999"}, status: StatusSkip},

	// Kernel for nftables.
	{name: "6.x", rule: "kernel.version", params: node(110), edit: func(f *Facts) { f.KernelRelease = "6.18.44-fc-v669" }, status: StatusOK},
	{name: "5.13 exactly", rule: "kernel.version", params: node(110), edit: func(f *Facts) { f.KernelRelease = "5.13.0" }, status: StatusOK},
	{name: "5.10", rule: "kernel.version", params: cp(5000), edit: func(f *Facts) { f.KernelRelease = "5.10.0-28-amd64" }, status: StatusWarn, rec: "≥ 5.13"},
	{name: "4.19", rule: "kernel.version", params: node(110), edit: func(f *Facts) { f.KernelRelease = "4.19.0" }, status: StatusWarn},
	{name: "unknown", rule: "kernel.version", params: node(110), edit: func(f *Facts) { f.KernelRelease = "" }, status: StatusSkip},

	// fsync.
	{name: "fast disk", rule: "disk.fsync", params: store(), edit: func(f *Facts) { f.Fsync = &FsyncResult{Dir: "/d", Samples: 200, BlockSize: 2300, P50ms: 0.5, P99ms: 2} }, status: StatusOK, rec: "p99 < 10 ms", whyHas: "~2000/s"},
	{name: "slowish disk", rule: "disk.fsync", params: store(), edit: func(f *Facts) { f.Fsync = &FsyncResult{P50ms: 8, P99ms: 15} }, status: StatusWarn},
	{name: "slow disk", rule: "disk.fsync", params: store(), edit: func(f *Facts) { f.Fsync = &FsyncResult{P50ms: 12, P99ms: 45} }, status: StatusFail},
	{name: "not measured", rule: "disk.fsync", params: store(), edit: func(f *Facts) { f.FsyncErr = "stat /x: no such file" }, status: StatusSkip, whyHas: "no such file"},
}

func TestRules(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range ruleCases {
		t.Run(c.rule+"/"+c.name, func(t *testing.T) {
			r, ok := RuleByID(c.rule)
			if !ok {
				t.Fatalf("no rule %q", c.rule)
			}
			covered[c.rule] = true
			f := kernelDefaults()
			for k, v := range c.set {
				if v == "" {
					delete(f.Sysctl, k)
				} else {
					f.Sysctl[k] = v
				}
			}
			if c.edit != nil {
				c.edit(f)
			}
			got := r.Eval(f, c.params)
			if got.Status != c.status {
				t.Errorf("status %s, want %s (current %q, recommended %q, why %q)", got.Status, c.status, got.Current, got.Recommended, got.Why)
			}
			if c.rec != "" && !strings.Contains(got.Recommended, c.rec) {
				t.Errorf("recommended %q, want it to contain %q", got.Recommended, c.rec)
			}
			if c.whyHas != "" && !strings.Contains(got.Why, c.whyHas) {
				t.Errorf("why %q lacks %q", got.Why, c.whyHas)
			}
			switch {
			case c.fix == "" && got.Fix != nil:
				t.Errorf("unexpected fix %+v", got.Fix)
			case c.fix != "":
				if got.Fix == nil {
					t.Fatalf("no fix, want %s", c.fix)
				}
				if got.Fix.Value != c.fix || got.Fix.Optional != c.fixOpt || got.Fix.Key != c.rule {
					t.Errorf("fix %+v, want %s = %s (optional %v)", got.Fix, c.rule, c.fix, c.fixOpt)
				}
			}
			if got.Status == StatusOK && got.Fix != nil {
				t.Errorf("ok check carries a fix %+v", got.Fix)
			}
			if got.Why == "" {
				t.Error("no why")
			}
		})
	}
	for _, r := range Rules {
		if !covered[r.ID] {
			t.Errorf("rule %s has no test case", r.ID)
		}
	}
}

func TestRulesHaveSources(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules {
		if seen[r.ID] {
			t.Errorf("duplicate rule %s", r.ID)
		}
		seen[r.ID] = true
		if len(r.Sources) == 0 || len(r.Roles) == 0 {
			t.Errorf("rule %s: needs sources and roles", r.ID)
		}
		for _, s := range r.Sources {
			if _, ok := Sources[s]; !ok {
				t.Errorf("rule %s: unknown source %q", r.ID, s)
			}
		}
	}
}

func TestEvaluateByRole(t *testing.T) {
	f := kernelDefaults()
	ids := func(p Params) map[string]bool {
		m := map[string]bool{}
		for _, c := range Evaluate(f, p) {
			m[c.ID] = true
			if len(c.Sources) == 0 || c.Title == "" {
				t.Errorf("%s: sources/title not filled", c.ID)
			}
		}
		return m
	}
	n, c, s := ids(node(110)), ids(cp(5000)), ids(store())
	if !n["net.ipv4.neigh.default.gc_thresh3"] || c["net.ipv4.neigh.default.gc_thresh3"] || s["net.ipv4.neigh.default.gc_thresh3"] {
		t.Error("neighbour tables are a node check")
	}
	if !s["disk.fsync"] || n["disk.fsync"] || c["disk.fsync"] {
		t.Error("fsync is a store check")
	}
	if !c["net.core.somaxconn"] || !s["net.core.somaxconn"] || n["net.core.somaxconn"] {
		t.Error("somaxconn is a server check")
	}
	for _, m := range []map[string]bool{n, c, s} {
		if !m["rlimit.nofile"] || !m["net.ipv4.ip_local_port_range"] {
			t.Error("nofile and port range apply to every role")
		}
	}
}

func TestNeighThresholds(t *testing.T) {
	for _, c := range []struct {
		pods       int
		t1, t2, t3 uint64
	}{
		{0, 128, 512, 1024}, {110, 128, 512, 1024}, {192, 128, 512, 1024}, {193, 256, 1024, 2048},
		{500, 512, 2048, 4096}, {1024, 1024, 4096, 8192}, {1023, 1024, 4096, 8192},
	} {
		a, b, d := NeighThresholds(c.pods)
		if a != c.t1 || b != c.t2 || d != c.t3 {
			t.Errorf("NeighThresholds(%d) = %d/%d/%d, want %d/%d/%d", c.pods, a, b, d, c.t1, c.t2, c.t3)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"control-plane", "store", "node"} {
		if r, err := ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	if _, err := ParseRole("master"); err == nil {
		t.Error("ParseRole(master) should fail")
	}
}
