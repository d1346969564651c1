package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// HostReport is the outcome of `doctor host`.
type HostReport struct {
	Role        Role           `json:"role"`
	PodsPerNode int            `json:"pods_per_node"`
	Nodes       int            `json:"nodes"`
	APIServers  int            `json:"apiservers"`
	CPUs        int            `json:"cpus"`
	Kernel      string         `json:"kernel"`
	Checks      []Check        `json:"checks"`
	Summary     map[Status]int `json:"summary"`
	Fix         *FixResult     `json:"fix,omitempty"`
}

// FixResult is what --fix wrote.
type FixResult struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Keys    int    `json:"keys"`
	Written bool   `json:"written"`
}

// NewHostReport evaluates the rules and summarises.
func NewHostReport(f *Facts, p Params) *HostReport {
	r := &HostReport{Role: p.Role, PodsPerNode: p.PodsPerNode, Nodes: p.Nodes, APIServers: p.apiservers(),
		CPUs: p.cpus(f), Kernel: f.KernelRelease, Summary: map[Status]int{}}
	r.Checks = Evaluate(f, p)
	for _, c := range r.Checks {
		r.Summary[c.Status]++
	}
	return r
}

// Problems is how many checks are warn or fail.
func (r *HostReport) Problems() int { return r.Summary[StatusWarn] + r.Summary[StatusFail] }

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	e.SetEscapeHTML(false)
	return e.Encode(v)
}

// WriteTable writes the host report for people.
func (r *HostReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "meganode doctor host: role %s, %d pods/node, %d nodes (%d apiservers), %d CPUs, kernel %s\n\n",
		r.Role, r.PodsPerNode, r.Nodes, r.APIServers, r.CPUs, r.Kernel)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tCURRENT\tRECOMMENDED")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.ID, c.Current, c.Recommended)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-4s %s — %s\n", strings.ToUpper(string(c.Status)), c.ID, c.Title)
		fmt.Fprintf(w, "     why: %s\n", c.Why)
		if c.Advice != "" {
			fmt.Fprintf(w, "     do:  %s\n", c.Advice)
		}
		if c.Fix != nil {
			fmt.Fprintf(w, "     fix: %s = %s\n", c.Fix.Key, c.Fix.Value)
		}
		ids := make([]string, len(c.Sources))
		for i, s := range c.Sources {
			ids[i] = s.ID
		}
		fmt.Fprintf(w, "     sources: %s\n", strings.Join(ids, ", "))
	}
	fmt.Fprintf(w, "\n%d ok, %d warn, %d fail, %d skipped\n", r.Summary[StatusOK], r.Summary[StatusWarn], r.Summary[StatusFail], r.Summary[StatusSkip])
	used := map[string]bool{}
	for _, c := range r.Checks {
		for _, s := range c.Sources {
			used[s.ID] = true
		}
	}
	fmt.Fprintln(w, "\nsources:")
	for _, id := range SourceIDs() {
		if used[id] {
			s := Sources[id]
			fmt.Fprintf(w, "  %-22s %s\n", id, s.Title)
		}
	}
}

// FixContent renders a sysctl drop-in for every check that carries a fix.
// It returns "" when there is nothing to fix.
func FixContent(checks []Check, header string) (string, int) {
	var lines []string
	for _, c := range checks {
		if c.Fix == nil {
			continue
		}
		prefix := ""
		if c.Fix.Optional {
			// systemd-sysctl ignores a failing '-' line (the module may load later at
			// boot); procps `sysctl -p` reports it and still applies the other lines.
			prefix = "-"
		}
		lines = append(lines, fmt.Sprintf("# %s: %s (was %s)", c.ID, c.Title, c.Current))
		lines = append(lines, fmt.Sprintf("%s%s = %s", prefix, c.Fix.Key, c.Fix.Value))
	}
	if len(lines) == 0 {
		return "", 0
	}
	return header + strings.Join(lines, "\n") + "\n", len(lines) / 2
}

// FixHeader is the comment at the top of the drop-in.
func FixHeader(r *HostReport, now time.Time) string {
	return fmt.Sprintf("# Written by `meganode doctor host --fix` on %s\n# for role %s, %d pods/node, %d nodes. Applied at boot by systemd-sysctl; apply now with: sysctl -p <this file>.\n# Lines starting with '-' may fail harmlessly (module not loaded yet).\n",
		now.UTC().Format(time.RFC3339), r.Role, r.PodsPerNode, r.Nodes)
}

// WriteFileAtomic writes content to path via a temporary file and rename, mode 0644.
func WriteFileAtomic(path, content string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WritePlanTable writes the plan for people.
func (p PlanOutput) WriteTable(w io.Writer) {
	in := p.Input
	fmt.Fprintf(w, "meganode doctor plan: %d nodes, %d pods (%.4g pods/s to place in %gs)\n", in.Nodes, in.Pods, in.PodsPerSecond, in.ScheduleSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v, why string) { fmt.Fprintf(tw, "  %s\t%s\t%s\n", k, v, why) }
	head := func(s string, src []string) {
		tw.Flush()
		fmt.Fprintf(w, "\n%s  [sources: %s]\n", s, strings.Join(src, ", "))
	}

	fmt.Fprintln(w, "\nFIGURES USED")
	for _, f := range p.Figures {
		row(f.Lines, f.Value, f.Source)
	}

	s := p.Store
	head("STORE", s.Sources)
	row("capacity", fmt.Sprintf("%.0f writes/s per store", s.CapacityWritesPerSec), s.CapacitySource)
	for _, l := range s.Loads {
		row("writes: "+l.Resource, fmt.Sprintf("%.0f/s", l.WritesPerSec), l.Basis)
	}
	row("writes: total", fmt.Sprintf("%.0f/s", s.TotalWritesPerSec), "")
	row("one store holds the leases", s.LeasesFit, fmt.Sprintf("%.0f lease writes/s vs %.0f/s (target ≤ %.0f%%)", s.LeaseWritesPerSec, s.CapacityWritesPerSec, 100*StoreTargetUtilisation))
	for _, sh := range s.Shards {
		row("shard "+sh.Name, sh.Endpoint, fmt.Sprintf("%s: %.0f writes/s, %.0f%% of capacity", strings.Join(sh.Resources, "+"), sh.WritesPerSec, 100*sh.Utilisation))
	}
	for _, f := range s.Flags {
		row("flag", f, "")
	}

	if g := p.StoreGroup; g != nil {
		head(fmt.Sprintf("STORE GROUPS (%d members per store)", g.Replicas), []string{"meganode-bench-group", "design-10"})
		row("members", fmt.Sprintf("%d per store, quorum %d", g.Replicas, g.Quorum), fmt.Sprintf("%d may be down at once; one member per machine (pod anti-affinity)", g.Tolerates))
		for _, s := range g.Stores {
			row("store "+s.Name, fmt.Sprintf("per member %.2f GiB, cores %d", s.MemoryGiBPerMember, s.CoresPerMember),
				fmt.Sprintf("%d objects (%s); leader %.2f cores, followers %.2f each; a member restarted empty serves again after ≈ %.1f s",
					s.Objects, s.ObjectsBasis, s.LeaderCores, s.FollowerCores, s.CatchUpSeconds))
		}
		row("total", fmt.Sprintf("%d machines, %d cores, %.1f GiB", g.Machines, g.Cores, g.MemoryGiB), g.Basis)
	}

	a := p.APIServer
	head("KUBE-APISERVER", a.Sources)
	row("count", fmt.Sprint(a.Count), a.CountBasis)
	row("per apiserver", fmt.Sprintf("%d connections, %d watches, %.0f writes/s", a.ConnsPerAPIServer, a.WatchesPerAPIServer, a.WritesPerAPIServer),
		fmt.Sprintf("%d conns and %.3g watches per node; every apiserver processes all %.0f watch events/s", ConnsPerNode, a.WatchesPerNode, a.WatchEventsPerSec))
	row("inflight", fmt.Sprintf("%d read-only, %d mutating", a.MaxRequestsInflight, a.MaxMutatingInflight), "tuning guide 1000/3000 from 1000 nodes (defaults 400/200); mutating ≥ writes/s per apiserver × 1 s SLO")
	row("memory", fmt.Sprintf("%.0f GiB", a.MemoryGiB), "k8s-1m: ~256 GB per apiserver at 1M nodes, scaled; override with --apiserver-memory")
	row("env", strings.Join(a.Env, " "), "GOGC in the hundreds, GOMEMLIMIT 15% under memory (k8s-1m)")
	for _, f := range a.Flags {
		row("flag", f, "")
	}

	c := p.ControllerManager
	head("KUBE-CONTROLLER-MANAGER", c.Sources)
	for _, f := range c.Flags {
		row("flag", f, "")
	}

	k := p.Kubelet
	head("KUBELET / KUBE-PROXY", k.Sources)
	row("lease", fmt.Sprintf("nodeLeaseDurationSeconds %d, renew every %.4g s", k.NodeLeaseDurationSeconds, k.LeaseRenewSeconds), "kubelet renews at 1/4 of the duration")
	row("pods per node", fmt.Sprintf("%d needed", k.PodsPerNodeNeeded), "")
	row("maxPods", fmt.Sprint(k.MaxPods), k.MaxPodsBasis)
	row("bridge limit", fmt.Sprintf("%d ports", k.BridgePortLimit), "BR_PORT_BITS=10: 1024 port numbers, port 0 reserved; measure with `doctor bridge --probe`")
	row("kube-proxy", fmt.Sprintf("--proxy-mode=%s --conntrack-max-per-core=%d", k.KubeProxyMode, k.ConntrackMaxPerCore), "nftables needs Linux ≥ 5.13")
	for _, f := range k.Flags {
		row("flag", f, "")
	}

	sc := p.Scheduler
	head("SCHEDULER", sc.Sources)
	row("shards", fmt.Sprint(sc.Shards), sc.Basis)
	row("cores", fmt.Sprint(sc.Cores), "S·K + collectors of the shape above, scaled with the shards")
	if sc.Shards > 1 {
		row("shape", fmt.Sprintf("--scatter=%d --parallel-pods=%d --collectors=%d", sc.Scatter, sc.ParallelPods, sc.Collectors), "the simulated shape the shards and cores come from")
	}
	row("relays", fmt.Sprintf("%d %v (fanout %d)", sc.Relays, sc.RelayLevels, sc.Fanout), "levels bottom-up; the top level watches the apiserver")
	row("estimate", fmt.Sprintf("%.1f s", sc.Seconds), fmt.Sprintf("to place all pods (the model's seconds × %.2f margin)", SimModelMargin))
	row("env", fmt.Sprintf("GOGC=%d GOMEMLIMIT=%s", sc.GOGC, sc.GOMEMLIMIT), "design §4")
	for _, f := range sc.Flags {
		row("flag", f, "")
	}

	ad := p.Addresses
	head("POD ADDRESSES", ad.Sources)
	v4 := ad.IPv4
	row("IPv4 "+v4.CIDR, fmt.Sprintf("%s per node, %s for pods", v4.PerNodeShare, v4.PodAddrsPerNode), v4.Note)
	for _, o := range ad.IPv6 {
		row("IPv6 "+o.NodePrefix+" per node", fmt.Sprintf("%s addresses, %d pods", o.AddrsPerNode, o.PodsPerNode),
			fmt.Sprintf("%s; cluster needs %s (last node %s); %s", o.Provider, o.ClusterPrefix, o.ExampleLast, o.ClusterCIDRArg))
	}
	row("", "", ad.Note)
	tw.Flush()

	if len(p.Problems) > 0 {
		fmt.Fprintln(w, "\nPROBLEMS")
		for _, x := range p.Problems {
			fmt.Fprintln(w, "  - "+x)
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintln(w, "\nNOTES")
		for _, x := range p.Notes {
			fmt.Fprintln(w, "  - "+x)
		}
	}
}

// YAMLText renders the plan as YAML followed by component configuration
// documents ready to paste (KubeletConfiguration, KubeProxyConfiguration).
func (p PlanOutput) YAMLText() string {
	var b strings.Builder
	b.WriteString("# meganode doctor plan\n")
	writeYAML(&b, reflect.ValueOf(p), 0)
	fmt.Fprintf(&b, `---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: %d
nodeStatusUpdateFrequency: %s
nodeLeaseDurationSeconds: %d
kubeAPIQPS: %d
kubeAPIBurst: %d
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %s
conntrack:
  maxPerCore: %d
  min: 131072
`, p.Kubelet.MaxPods, p.Kubelet.NodeStatusUpdateFrequency, p.Kubelet.NodeLeaseDurationSeconds,
		p.Kubelet.KubeAPIQPS, p.Kubelet.KubeAPIBurst, p.Kubelet.KubeProxyMode, p.Kubelet.ConntrackMaxPerCore)
	return b.String()
}

// writeYAML is a small reflective YAML emitter for the plan's plain structs:
// field names from json tags, strings always double-quoted (JSON string syntax
// is valid YAML), omitempty honoured.
func writeYAML(b *strings.Builder, v reflect.Value, indent int) {
	pad := strings.Repeat("  ", indent)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omitempty") && fv.IsZero() {
				continue
			}
			writeYAMLField(b, pad, name, fv, indent)
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			writeYAMLField(b, pad, fmt.Sprint(k), v.MapIndex(k), indent)
		}
	}
}

func writeYAMLField(b *strings.Builder, pad, name string, fv reflect.Value, indent int) {
	for fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Interface {
		if fv.IsNil() {
			fmt.Fprintf(b, "%s%s: null\n", pad, name)
			return
		}
		fv = fv.Elem()
	}
	switch fv.Kind() {
	case reflect.Struct, reflect.Map:
		if fv.Kind() == reflect.Map && fv.Len() == 0 {
			fmt.Fprintf(b, "%s%s: {}\n", pad, name)
			return
		}
		fmt.Fprintf(b, "%s%s:\n", pad, name)
		writeYAML(b, fv, indent+1)
	case reflect.Slice:
		if fv.Len() == 0 {
			fmt.Fprintf(b, "%s%s: []\n", pad, name)
			return
		}
		fmt.Fprintf(b, "%s%s:\n", pad, name)
		for i := 0; i < fv.Len(); i++ {
			e := fv.Index(i)
			if e.Kind() == reflect.Struct {
				var sub strings.Builder
				writeYAML(&sub, e, 0)
				lines := strings.Split(strings.TrimRight(sub.String(), "\n"), "\n")
				for j, l := range lines {
					if j == 0 {
						fmt.Fprintf(b, "%s  - %s\n", pad, l)
					} else {
						fmt.Fprintf(b, "%s    %s\n", pad, l)
					}
				}
				continue
			}
			fmt.Fprintf(b, "%s  - %s\n", pad, yamlScalar(e))
		}
	default:
		fmt.Fprintf(b, "%s%s: %s\n", pad, name, yamlScalar(fv))
	}
}

func yamlScalar(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		q, _ := json.Marshal(v.String())
		return string(q)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(math.Round(v.Float()*1000)/1000, 'f', -1, 64)
	}
	q, _ := json.Marshal(fmt.Sprint(v.Interface()))
	return string(q)
}
