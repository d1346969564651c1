package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The scale report: each stack at each size it ran, what stopped it, and the largest size it
// held. A figure not measured is nil (printed "missing"), never zero.

// The EKS scalability SLOs the scale run holds API calls to (p99 over the pod-creation window).
const (
	EKSSLOSeconds     = 1.0  // gets and writes
	EKSListSLOSeconds = 30.0 // lists
)

// What stopped a stack at a size.
const (
	StopTimeout     = "timeout"
	StopMemory      = "memory"
	StopProcess     = "process exited"
	StopError       = "error"
	StopInterrupted = "interrupted"
)

// ScaleVerb is one API verb's latency in a window against its EKS SLO.
type ScaleVerb struct {
	Verb       string   `json:"verb"`
	Count      float64  `json:"count"`
	P99Seconds *float64 `json:"p99_seconds"`
	SLOSeconds float64  `json:"slo_seconds"`
	OK         *bool    `json:"ok"`
}

// ScaleUsage is one component's CPU (average cores over a phase) and peak RSS.
type ScaleUsage struct {
	Name       string   `json:"name"`
	NodesCores *float64 `json:"nodes_phase_cores"` // average cores busy while the nodes were made and came Ready
	PodsCores  *float64 `json:"pods_phase_cores"`  // … while the pods were created and placed
	PeakRSSMiB *float64 `json:"peak_rss_mib"`      // the larger of both phases' peaks
}

// ScaleRun is one stack at one size.
type ScaleRun struct {
	Stack     string `json:"stack"`
	Store     string `json:"store"`
	Scheduler string `json:"scheduler"`
	Nodes     int    `json:"nodes"`
	Pods      int    `json:"pods"`
	StateDir  string `json:"state_dir"`
	// Held: every node Ready with its Lease and every pod placed within the timeouts, no
	// process lost, memory above the floor. Otherwise Stop says what stopped it (StopTimeout, …)
	// and Error how.
	Held  bool   `json:"held"`
	Stop  string `json:"stop,omitempty"`
	Error string `json:"error,omitempty"`
	Phase string `json:"failed_phase,omitempty"` // up | nodes | pods | hold

	StoreShards            int      `json:"store_shards"`
	NodeLeaseSeconds       int      `json:"node_lease_seconds"`
	LeaseRenewEverySeconds float64  `json:"lease_renew_every_seconds"`
	LeaseRenewalsExpected  float64  `json:"lease_renewals_per_sec_expected"` // nodes / renewal period
	UpSeconds              *float64 `json:"up_seconds"`                      // the control plane, before any node

	NodesCreateSeconds *float64 `json:"nodes_create_seconds"` // until the last node create returned
	NodesReadySeconds  *float64 `json:"nodes_ready_seconds"`  // first create → every node Ready with its Lease (the reference's figure)
	// NodesSchedulableSeconds: first create → every node also without the not-ready taint the
	// apiserver puts on a new node (kube-controller-manager's node lifecycle controller lifts it,
	// 8 workers, a GET and a PATCH a node); the pods are created after it.
	NodesSchedulableSeconds *float64 `json:"nodes_schedulable_seconds"`
	NodesReady              int      `json:"nodes_ready"` // Ready with a Lease, at the end of the nodes phase
	NodesSchedulable        int      `json:"nodes_schedulable"`
	Leases                  int      `json:"leases"`

	PodsCreateSeconds *float64   `json:"pods_create_seconds"`  // until the last pod create returned
	PodsPlacedSeconds *float64   `json:"pods_placed_seconds"`  // first create → every pod with a node
	PodsPerSec        *float64   `json:"pods_per_sec"`         // pods bound / PodsPlacedSeconds
	BindP99Seconds    *float64   `json:"pod_bind_p99_seconds"` // a pod's create → it has a node, p99 (through the watch)
	PodsBound         int        `json:"pods_bound"`           // seen with a node through the watch
	BindingsOK        *float64   `json:"bindings_ok"`          // POST pods/binding answered < 400 in the pod window (every pod bound once: = pods)
	Placement         *Placement `json:"placement"`

	APIByVerb    []ScaleVerb  `json:"api_p99_by_verb"` // pod-creation window
	APISLOMet    *bool        `json:"api_slo_met"`     // every verb's p99 within its EKS SLO
	Components   []ScaleUsage `json:"components"`
	MachineCores *float64     `json:"machine_busy_cores_pods_phase"` // every process on the machine

	HoldSeconds         *float64 `json:"hold_seconds"`
	LeaseRenewalsPerSec *float64 `json:"lease_renewals_per_sec"` // measured after the pods were placed, over HoldSeconds
	LeaseHeldRatio      *float64 `json:"lease_renewals_held_ratio"`
	MinMemAvailableMiB  *float64 `json:"min_mem_available_mib"`
	Seconds             float64  `json:"seconds"` // up → down

	NodesReport *Report  `json:"-"` // written beside: <stack>-<nodes>/{nodes,pods,hold}/report.json
	PodsReport  *Report  `json:"-"`
	HoldReport  *Report  `json:"-"`
	Notes       []string `json:"notes,omitempty"`
}

// ScaleStack is one stack's ladder: its runs and the largest size it held.
type ScaleStack struct {
	Name        string     `json:"name"`
	Store       string     `json:"store"`
	Scheduler   string     `json:"scheduler"`
	Runs        []ScaleRun `json:"runs"`
	LargestHeld *int       `json:"largest_nodes_held"` // nil: held none
	StoppedAt   *int       `json:"stopped_at_nodes"`   // the first size it did not hold
	StoppedBy   string     `json:"stopped_by,omitempty"`
}

// ScaleReport is report.json of `bench scale`.
type ScaleReport struct {
	Started          time.Time    `json:"started"`
	Command          string       `json:"command"`
	Cores            int          `json:"cores"`
	MemTotalMiB      float64      `json:"mem_total_mib"`
	Sizes            []int        `json:"sizes"`
	PodsPerNode      float64      `json:"pods_per_node"`
	LeasePolicy      string       `json:"lease_policy"`
	MaxLeaseRate     float64      `json:"max_lease_renewals_per_sec"`
	Stacks           []ScaleStack `json:"stacks"`
	Notes            []string     `json:"notes,omitempty"`
	FinishedSeconds  float64      `json:"seconds"`
	DataOnTmpfs      bool         `json:"data_on_tmpfs"`
	MemFloorMiB      float64      `json:"mem_floor_mib"`
	CreateConcurrent int          `json:"create_concurrency"`
}

// Add records a run in its stack (made on first use) and updates the stack's figures.
func (r *ScaleReport) Add(run ScaleRun) {
	i := -1
	for k := range r.Stacks {
		if r.Stacks[k].Name == run.Stack {
			i = k
		}
	}
	if i < 0 {
		r.Stacks = append(r.Stacks, ScaleStack{Name: run.Stack, Store: run.Store, Scheduler: run.Scheduler})
		i = len(r.Stacks) - 1
	}
	s := &r.Stacks[i]
	s.Runs = append(s.Runs, run)
	switch {
	case run.Held && (s.LargestHeld == nil || run.Nodes > *s.LargestHeld):
		n := run.Nodes
		s.LargestHeld = &n
	case !run.Held && run.Stop != StopInterrupted && s.StoppedAt == nil:
		n := run.Nodes
		s.StoppedAt, s.StoppedBy = &n, run.Stop+": "+run.Error
	}
}

// SetVerbs fills APIByVerb and APISLOMet from a window's report.
func (run *ScaleRun) SetVerbs(rep *Report) {
	if rep == nil {
		return
	}
	met := true
	any := false
	for _, a := range rep.APIByVerb {
		v := ScaleVerb{Verb: a.Verb, Count: a.Count, SLOSeconds: EKSSLOSeconds}
		if a.Verb == "LIST" {
			v.SLOSeconds = EKSListSLOSeconds
		}
		if a.Count > 0 && !math.IsNaN(a.P99) && !math.IsInf(a.P99, 0) {
			v.P99Seconds = ptr(a.P99)
			ok := a.P99 <= v.SLOSeconds
			v.OK = &ok
			met = met && ok
			any = true
		}
		run.APIByVerb = append(run.APIByVerb, v)
	}
	if any {
		run.APISLOMet = &met
	}
	for _, a := range rep.API {
		if a.Verb == "POST" && a.Resource == "pods" && a.Subresource == "binding" {
			ok := a.Count
			for _, e := range rep.APIErrors {
				if e.Verb == "POST" && e.Resource == "pods" && e.Subresource == "binding" {
					ok -= e.Count
				}
			}
			run.BindingsOK = ptr(ok)
		}
	}
}

// SetUsage fills Components from the nodes and pods windows' reports.
func (run *ScaleRun) SetUsage(nodes, pods *Report) {
	var names []string
	seen := map[string]bool{}
	for _, rep := range []*Report{nodes, pods} {
		if rep == nil {
			continue
		}
		for _, u := range rep.Components {
			if !seen[u.Name] {
				seen[u.Name] = true
				names = append(names, u.Name)
			}
		}
	}
	find := func(rep *Report, name string) *Usage {
		if rep == nil {
			return nil
		}
		for i := range rep.Components {
			if rep.Components[i].Name == name {
				return &rep.Components[i]
			}
		}
		return nil
	}
	for _, name := range names {
		u := ScaleUsage{Name: name}
		var peak float64
		for i, rep := range []*Report{nodes, pods} {
			c := find(rep, name)
			if c == nil || rep.Seconds <= 0 {
				continue
			}
			cores := ptr(c.CPUSeconds / rep.Seconds)
			if i == 0 {
				u.NodesCores = cores
			} else {
				u.PodsCores = cores
			}
			peak = max(peak, c.PeakRSSMiB)
			u.PeakRSSMiB = ptr(peak)
		}
		run.Components = append(run.Components, u)
	}
}

// WriteFiles writes report.json and summary.md into dir (and each run's window reports, with
// their charts, into <dir>/<stack>-<nodes>/{nodes,pods,hold}).
func (r *ScaleReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return err
	}
	r.Summary(f)
	if err := f.Close(); err != nil {
		return err
	}
	for _, s := range r.Stacks {
		for _, run := range s.Runs {
			for name, rep := range map[string]*Report{"nodes": run.NodesReport, "pods": run.PodsReport, "hold": run.HoldReport} {
				if rep == nil {
					continue
				}
				if _, err := rep.WriteFiles(filepath.Join(dir, fmt.Sprintf("%s-%d", run.Stack, run.Nodes), name)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Cell formats a figure with FormatValue ("missing" when nil).
func cell(v *float64) string { return FormatValue(v) }

func cellMs(v *float64) string {
	if v == nil {
		return Missing
	}
	return FormatValue(ptr(*v * 1e3))
}

func cellBool(v *bool, yes, no string) string {
	switch {
	case v == nil:
		return Missing
	case *v:
		return yes
	default:
		return no
	}
}

// Summary writes summary.md: one column per stack and size, one row per figure.
func (r *ScaleReport) Summary(w io.Writer) {
	fmt.Fprintf(w, "# meganode bench scale — %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "`%s`\n\n", r.Command)
	fmt.Fprintf(w, "Machine: %d cores, %.1f GiB RAM, shared by every process of the cluster and this command. ", r.Cores, r.MemTotalMiB/1024)
	fmt.Fprintf(w, "Procedure per stack and size (fresh cluster each): the control plane up → the nodes made (KWOK) → every node Ready with its Lease (timed) → every node untainted by the node lifecycle controller (timed) → pods created (%.3g per node), as fast as kube-apiserver takes them, %d in flight → every pod with a node (timed) → a quiet window measuring the lease renewals → down. ", r.PodsPerNode, r.CreateConcurrent)
	fmt.Fprintf(w, "Node leases: %s.\n\n", r.LeasePolicy)
	var runs []ScaleRun
	for _, s := range r.Stacks {
		runs = append(runs, s.Runs...)
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Nodes < runs[j].Nodes })
	if len(runs) == 0 {
		fmt.Fprintln(w, "No run.")
		return
	}
	fmt.Fprint(w, "| |")
	for _, run := range runs {
		fmt.Fprintf(w, " %s %s |", run.Stack, humanCount(run.Nodes))
	}
	fmt.Fprint(w, "\n|---|")
	for range runs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	row := func(label string, f func(ScaleRun) string) {
		fmt.Fprintf(w, "| %s |", label)
		for _, run := range runs {
			fmt.Fprintf(w, " %s |", f(run))
		}
		fmt.Fprintln(w)
	}
	row("nodes / pods", func(s ScaleRun) string { return fmt.Sprintf("%d / %d", s.Nodes, s.Pods) })
	row("held", func(s ScaleRun) string {
		if s.Held {
			return "yes"
		}
		return "**no: " + s.Stop + " (" + s.Phase + ")**"
	})
	row("store shards", func(s ScaleRun) string {
		if s.UpSeconds == nil {
			return Missing
		}
		return fmt.Sprint(s.StoreShards)
	})
	row("node lease duration / renewal every (s)", func(s ScaleRun) string {
		return fmt.Sprintf("%d / %.0f", s.NodeLeaseSeconds, s.LeaseRenewEverySeconds)
	})
	row("control plane up (s)", func(s ScaleRun) string { return cell(s.UpSeconds) })
	row("nodes created (s)", func(s ScaleRun) string { return cell(s.NodesCreateSeconds) })
	row("**all nodes Ready with Lease (s)**", func(s ScaleRun) string { return cell(s.NodesReadySeconds) })
	row("all nodes untainted (s; node lifecycle controller)", func(s ScaleRun) string { return cell(s.NodesSchedulableSeconds) })
	row("pods created (s)", func(s ScaleRun) string { return cell(s.PodsCreateSeconds) })
	row("**all pods placed (s)**", func(s ScaleRun) string { return cell(s.PodsPlacedSeconds) })
	row("**pods/s**", func(s ScaleRun) string { return cell(s.PodsPerSec) })
	row("pod create → bound p99 (s)", func(s ScaleRun) string { return cell(s.BindP99Seconds) })
	row("pods bound (watch) / bindings OK", func(s ScaleRun) string {
		return fmt.Sprintf("%d / %s", s.PodsBound, cell(s.BindingsOK))
	})
	row("max pods on a node / over-committed nodes", func(s ScaleRun) string {
		if s.Placement == nil {
			return Missing
		}
		return fmt.Sprintf("%d / %d", s.Placement.MaxPerNode, s.Placement.OverCommitted)
	})
	for _, verb := range scaleVerbs(runs) {
		slo := EKSSLOSeconds
		if verb == "LIST" {
			slo = EKSListSLOSeconds
		}
		row(fmt.Sprintf("API p99 %s, pod window (ms; SLO %.0f s)", verb, slo), func(s ScaleRun) string {
			for _, v := range s.APIByVerb {
				if v.Verb == verb {
					return cellMs(v.P99Seconds) + cellBool(v.OK, "", " ✗")
				}
			}
			return Missing
		})
	}
	row("**API SLOs (EKS) met in the pod window**", func(s ScaleRun) string { return cellBool(s.APISLOMet, "yes", "**no**") })
	for _, comp := range scaleComponents(runs) {
		row(comp+" CPU cores: nodes / pods phase", func(s ScaleRun) string {
			for _, u := range s.Components {
				if u.Name == comp {
					return cell(u.NodesCores) + " / " + cell(u.PodsCores)
				}
			}
			return Missing
		})
		row(comp+" peak RSS (MiB)", func(s ScaleRun) string {
			for _, u := range s.Components {
				if u.Name == comp {
					return cell(u.PeakRSSMiB)
				}
			}
			return Missing
		})
	}
	row("machine busy cores, pod phase", func(s ScaleRun) string { return cell(s.MachineCores) })
	row("**lease renewals/s held** (expected)", func(s ScaleRun) string {
		return fmt.Sprintf("%s (%s)", cell(s.LeaseRenewalsPerSec), FormatValue(ptr(s.LeaseRenewalsExpected)))
	})
	row("lowest MemAvailable (MiB)", func(s ScaleRun) string { return cell(s.MinMemAvailableMiB) })
	row("run (s)", func(s ScaleRun) string { return FormatValue(ptr(s.Seconds)) })
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Largest size held")
	fmt.Fprintln(w)
	for _, s := range r.Stacks {
		held := "none"
		if s.LargestHeld != nil {
			held = fmt.Sprintf("%d nodes", *s.LargestHeld)
		}
		stop := "not stopped by the sizes run"
		if s.StoppedAt != nil {
			stop = fmt.Sprintf("stopped at %d nodes by %s", *s.StoppedAt, s.StoppedBy)
		}
		fmt.Fprintf(w, "- **%s** (%s + %s): %s; %s\n", s.Name, storeTitle(s.Store), s.Scheduler, held, stop)
	}
	var notes []string
	notes = append(notes, r.Notes...)
	for _, run := range runs {
		if run.Error != "" {
			notes = append(notes, fmt.Sprintf("%s %d: %s", run.Stack, run.Nodes, run.Error))
		}
		for _, n := range run.Notes {
			notes = append(notes, fmt.Sprintf("%s %d: %s", run.Stack, run.Nodes, n))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\n## Notes")
		fmt.Fprintln(w)
		for _, n := range notes {
			n = strings.ReplaceAll(n, "\n", " ")
			if r := []rune(n); len(r) > 400 { // a component's log lines: report.json has the whole error
				n = string(r[:400]) + " …"
			}
			fmt.Fprintln(w, "- "+n)
		}
	}
	fmt.Fprintln(w, "\n\"missing\" = not measured (the run stopped before it, or the window saw no such call); never printed as zero.")
	fmt.Fprintln(w, "API p99 from kube-apiserver's apiserver_request_duration_seconds over the pod window, every client; ✗ = over the SLO. CPU from /proc of each process.")
}

func scaleVerbs(runs []ScaleRun) []string {
	count := map[string]float64{}
	for _, r := range runs {
		for _, v := range r.APIByVerb {
			count[v.Verb] += v.Count
		}
	}
	return busiestFirst(count)
}

// scaleComponents: the store(s), kube-apiserver and the scheduler first, then the rest.
func scaleComponents(runs []ScaleRun) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range runs {
		for _, u := range r.Components {
			if !seen[u.Name] {
				seen[u.Name] = true
				out = append(out, u.Name)
			}
		}
	}
	rank := func(n string) int {
		switch {
		case strings.HasPrefix(n, "store") || strings.HasPrefix(n, "etcd"):
			return 0
		case n == "kube-apiserver":
			return 1
		case strings.Contains(n, "scheduler"):
			return 2
		default:
			return 3
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

func humanCount(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dK", n/1000)
	default:
		return fmt.Sprint(n)
	}
}
