package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Plan is a whole comparison: one workload, a list of client counts (a sweep
// when there are several), targets run in turn (A/B/A/B…) for a number of rounds
// on fresh servers, medians reported.
type Plan struct {
	Workload     string
	Cfg          Config
	ClientCounts []int
	Targets      []TargetSpec
	Rounds       int
	Progress     *Progress
	Command      []string
}

// Report is everything a plan produced; it is what results.json holds.
type Report struct {
	Meta     Meta          `json:"meta"`
	Runs     []*Result     `json:"runs"`
	Memory   *MemoryResult `json:"memory,omitempty"`
	State    *StateReport  `json:"state,omitempty"`
	Failures []string      `json:"failures,omitempty"`
}

// MemoryResult is what `bench memory` measured: each store's resident memory
// after Keys Lease-sized keys were each written Updates times and history was
// compacted (etcd also defragmented, and its database file counted).
type MemoryResult struct {
	Keys        int     `json:"keys"`
	Updates     int     `json:"updates"`
	ValueSize   int     `json:"value_size"`
	MeganodeRSS float64 `json:"meganode_rss_mib"`
	EtcdRSS     float64 `json:"etcd_rss_mib"`
	EtcdDB      float64 `json:"etcd_db_mib"`
}

// Ratio is meganode's RSS over etcd's RSS plus database file (0 when either is missing).
func (m *MemoryResult) Ratio() float64 {
	if m == nil || m.MeganodeRSS == 0 || m.EtcdRSS+m.EtcdDB == 0 {
		return 0
	}
	return m.MeganodeRSS / (m.EtcdRSS + m.EtcdDB)
}

// Meta describes where and how the figures were taken.
type Meta struct {
	Generated time.Time `json:"generated"`
	Host      string    `json:"host"`
	CPUs      int       `json:"cpus"`
	CPUModel  string    `json:"cpu_model,omitempty"`
	Kernel    string    `json:"kernel,omitempty"`
	GoVersion string    `json:"go_version"`
	Commands  []string  `json:"commands,omitempty"`
}

// NewMeta describes this machine.
func NewMeta(cmd []string) Meta {
	host, _ := os.Hostname()
	m := Meta{Generated: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if len(cmd) > 0 {
		m.Commands = []string{strings.Join(cmd, " ")}
	}
	return m
}

// Execute runs the plan. A failed run is recorded in Failures and the plan goes
// on, so one broken target does not lose the other's figures.
func (p Plan) Execute(ctx context.Context) *Report {
	rep := &Report{Meta: NewMeta(p.Command)}
	rounds := p.Rounds
	if rounds <= 0 {
		rounds = 1
	}
	counts := p.ClientCounts
	if len(counts) == 0 {
		counts = []int{p.Cfg.Clients}
	}
	for _, c := range counts {
		for round := 1; round <= rounds; round++ {
			for _, spec := range p.Targets {
				if ctx.Err() != nil {
					rep.Failures = append(rep.Failures, ctx.Err().Error())
					return rep
				}
				cfg := p.Cfg
				cfg.Clients = c
				cfg.Progress = p.Progress
				res, err := p.one(ctx, spec, cfg, round)
				if res != nil {
					rep.Runs = append(rep.Runs, res)
				}
				if err != nil {
					msg := fmt.Sprintf("%s on %s, %d clients, round %d: %v", p.Workload, spec.Name(), c, round, err)
					rep.Failures = append(rep.Failures, msg)
					p.Progress.Printf("FAILED: %s", msg)
				} else if res != nil {
					p.Progress.Printf("  %s", oneLine(res))
				}
			}
		}
	}
	return rep
}

func (p Plan) one(ctx context.Context, spec TargetSpec, cfg Config, round int) (*Result, error) {
	p.Progress.Phase(fmt.Sprintf("starting %s…", spec.Name()))
	t, err := spec.Start()
	if err != nil {
		return nil, err
	}
	defer t.Close()
	wl, err := New(p.Workload, cfg)
	if err != nil {
		return nil, err
	}
	return Execute(ctx, wl, t, cfg, round)
}

func oneLine(r *Result) string {
	s := fmt.Sprintf("%s %s c=%d r%d: %s ops/s, p50 %s p99 %s", r.Name(), r.Target, r.Clients, r.Round,
		HumanRate(r.OpsPerSec), FmtUs(r.Latency.P50Us), FmtUs(r.Latency.P99Us))
	if r.Server.Measured && len(r.Server.Members) > 1 {
		per := make([]string, len(r.Server.Members))
		for i, m := range r.Server.Members {
			per[i] = fmt.Sprintf("%.1f", m.CPUMicros/float64(max(r.Ops, 1)))
		}
		s += fmt.Sprintf(", server %.1f µs/op summed over %d members (%s), peak RSS %s summed, %s the largest member",
			r.ServerCPUPerOpUs, len(r.Server.Members), strings.Join(per, " + "), FmtBytes(float64(r.Server.PeakRSS)),
			FmtBytes(float64(r.Server.MaxMemberPeakRSS)))
	} else if r.Server.Measured {
		s += fmt.Sprintf(", server %.1f µs/op, peak RSS %s", r.ServerCPUPerOpUs, FmtBytes(float64(r.Server.PeakRSS)))
	}
	if r.Errors > 0 {
		s += fmt.Sprintf(", %d errors", r.Errors)
	}
	if len(r.Latency.Slowest) > 0 {
		s += "; slowest 0.1 %: " + FmtSlowest(r.Latency.Slowest)
	}
	return s
}

// Summary is the median over the rounds of one (workload, label, clients, target).
type Summary struct {
	Workload         string             `json:"workload"`
	Label            string             `json:"label,omitempty"`
	Target           string             `json:"target"`
	Clients          int                `json:"clients"`
	Rounds           int                `json:"rounds"`
	OpsPerSec        float64            `json:"ops_per_sec"`
	P50Us            float64            `json:"p50_us"`
	P90Us            float64            `json:"p90_us"`
	P99Us            float64            `json:"p99_us"`
	P999Us           float64            `json:"p999_us"`
	MaxUs            float64            `json:"max_us"`
	ServerCPUPerOpUs float64            `json:"server_cpu_per_op_us"`
	ClientCPUPerOpUs float64            `json:"client_cpu_per_op_us"`
	PeakRSSBytes     float64            `json:"peak_rss_bytes"`
	OtherCores       float64            `json:"other_cores"`
	Errors           int64              `json:"errors"`
	Extra            map[string]float64 `json:"extra,omitempty"`

	// A group's (Target "meganode (3 members)"): its members, and the largest member's
	// peak RSS (median over the rounds); CPU and PeakRSSBytes above are summed over them.
	Members               int     `json:"members,omitempty"`
	MaxMemberPeakRSSBytes float64 `json:"max_member_peak_rss_bytes,omitempty"`
}

// Name with label.
func (s *Summary) Name() string { return displayName(s.Workload, s.Label) }

// Summarize groups runs and takes medians, ordered by workload, clients, target.
func Summarize(runs []*Result) []*Summary {
	type key struct {
		w, l, t string
		c       int
	}
	groups := map[key][]*Result{}
	var order []key
	for _, r := range runs {
		k := key{r.Workload, r.Label, r.Target, r.Clients}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []*Summary
	for _, k := range order {
		rs := groups[k]
		pick := func(f func(*Result) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = f(r)
			}
			return median(xs)
		}
		s := &Summary{Workload: k.w, Label: k.l, Target: k.t, Clients: k.c, Rounds: len(rs),
			OpsPerSec:        pick(func(r *Result) float64 { return r.OpsPerSec }),
			P50Us:            pick(func(r *Result) float64 { return r.Latency.P50Us }),
			P90Us:            pick(func(r *Result) float64 { return r.Latency.P90Us }),
			P99Us:            pick(func(r *Result) float64 { return r.Latency.P99Us }),
			P999Us:           pick(func(r *Result) float64 { return r.Latency.P999Us }),
			MaxUs:            pick(func(r *Result) float64 { return r.Latency.MaxUs }),
			ServerCPUPerOpUs: pick(func(r *Result) float64 { return r.ServerCPUPerOpUs }),
			ClientCPUPerOpUs: pick(func(r *Result) float64 { return r.ClientCPUPerOpUs }),
			PeakRSSBytes:     pick(func(r *Result) float64 { return float64(r.Server.PeakRSS) }),
			OtherCores:       pick(func(r *Result) float64 { return r.OtherCores }),
			Extra:            map[string]float64{},
		}
		if rs[0].Members > 1 {
			s.Members = rs[0].Members
			s.MaxMemberPeakRSSBytes = pick(func(r *Result) float64 { return float64(r.Server.MaxMemberPeakRSS) })
		}
		for _, r := range rs {
			s.Errors += r.Errors
		}
		names := map[string]bool{}
		for _, r := range rs {
			for n := range r.Extra {
				names[n] = true
			}
		}
		for n := range names {
			s.Extra[n] = pick(func(r *Result) float64 { return r.Extra[n] })
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Name() != b.Name() {
			return workloadOrder(a) < workloadOrder(b)
		}
		if a.Clients != b.Clients {
			return a.Clients < b.Clients
		}
		return targetOrder(a.Target) < targetOrder(b.Target)
	})
	return out
}

func workloadOrder(s *Summary) string {
	i := 9
	for j, w := range Workloads {
		if w == s.Workload {
			i = j
		}
	}
	return fmt.Sprintf("%d %s", i, s.Name())
}

// targetOrder sorts one server before groups (by size), meganode before etcd.
func targetOrder(t string) string {
	kind, members := targetKind(t)
	switch kind {
	case TargetMeganode:
		return fmt.Sprintf("%06d 0", members)
	case TargetEtcd:
		return fmt.Sprintf("%06d 1", members)
	}
	return fmt.Sprintf("%06d 2%s", members, t)
}

// Comparison is meganode against etcd at one point (one server each, or groups of
// Members members each).
type Comparison struct {
	Name     string
	Clients  int
	Members  int // 1: one server each
	Meganode *Summary
	Etcd     *Summary
}

// Label is the comparison's workload name, with the members of groups.
func (c Comparison) Label() string {
	if c.Members > 1 {
		return fmt.Sprintf("%s [%d members each]", c.Name, c.Members)
	}
	return c.Name
}

// ThroughputX is meganode's ops/s over etcd's.
func (c Comparison) ThroughputX() float64 { return ratio(c.Meganode.OpsPerSec, c.Etcd.OpsPerSec) }

// CPUX is meganode's server CPU per op over etcd's.
func (c Comparison) CPUX() float64 {
	return ratio(c.Meganode.ServerCPUPerOpUs, c.Etcd.ServerCPUPerOpUs)
}

// P99X is meganode's p99 latency over etcd's.
func (c Comparison) P99X() float64 { return ratio(c.Meganode.P99Us, c.Etcd.P99Us) }

// RSSX is meganode's peak RSS over etcd's.
func (c Comparison) RSSX() float64 { return ratio(c.Meganode.PeakRSSBytes, c.Etcd.PeakRSSBytes) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Compare pairs meganode and etcd summaries at equal workload, clients and members
// (one server against one server, a group against a group of the same size).
func Compare(sums []*Summary) []Comparison {
	var out []Comparison
	for _, m := range sums {
		mk, mn := targetKind(m.Target)
		if mk != TargetMeganode {
			continue
		}
		for _, e := range sums {
			ek, en := targetKind(e.Target)
			if ek == TargetEtcd && en == mn && e.Name() == m.Name() && e.Clients == m.Clients {
				out = append(out, Comparison{Name: m.Name(), Clients: m.Clients, Members: mn, Meganode: m, Etcd: e})
			}
		}
	}
	return out
}

// Merge combines reports (e.g. one per workload) into one.
func Merge(reps ...*Report) *Report {
	out := &Report{}
	for i, r := range reps {
		if i == 0 || r.Meta.Generated.After(out.Meta.Generated) {
			cmds := out.Meta.Commands
			out.Meta = r.Meta
			out.Meta.Commands = cmds
		}
		out.Meta.Commands = append(out.Meta.Commands, r.Meta.Commands...)
		out.Runs = append(out.Runs, r.Runs...)
		if r.Memory != nil {
			out.Memory = r.Memory
		}
		if r.State != nil {
			out.State = r.State
		}
		out.Failures = append(out.Failures, r.Failures...)
	}
	return out
}
