package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// HeartbeatTargetRatio is issue 37's target: meganode's ceiling ≥ 1.5× stock's.
const HeartbeatTargetRatio = 1.5

// HeartbeatReport is `bench heartbeat`'s result: each store's steps and ceiling, and the ratio.
type HeartbeatReport struct {
	Command       []string            `json:"command"`
	Started       time.Time           `json:"started"`
	Cores         int                 `json:"cores"`
	Leases        int                 `json:"leases"`
	Rates         []float64           `json:"rates_asked"`
	StepSeconds   float64             `json:"step_seconds"`
	WarmupSeconds float64             `json:"warmup_seconds"`
	P99LimitMs    float64             `json:"put_p99_limit_ms"`
	Runs          []HeartbeatStoreRun `json:"runs"`
	// Ratio: meganode's ceiling / etcd's (0 = missing: a store not run or without a ceiling);
	// ZeroCostRatio the same for the zero-cost-generator ceilings.
	Ratio         float64  `json:"ratio_meganode_over_etcd,omitempty"`
	ZeroCostRatio float64  `json:"zero_cost_ratio_meganode_over_etcd,omitempty"`
	Target        string   `json:"target"`
	Notes         []string `json:"notes,omitempty"`
}

// Run is the named store's run (nil when not run).
func (r *HeartbeatReport) Run(store string) *HeartbeatStoreRun {
	for i := range r.Runs {
		if r.Runs[i].Store == store {
			return &r.Runs[i]
		}
	}
	return nil
}

// Finish computes the ratios and the target's verdict.
func (r *HeartbeatReport) Finish() {
	m, e := r.Run(TargetMeganode), r.Run(TargetEtcd)
	if m == nil || e == nil {
		r.Target = "not judged: one store run"
		return
	}
	mc, ec := m.Ceiling, e.Ceiling
	if mc.Found && ec.Found {
		r.Ratio = HeartbeatRatio(mc.PerSec, ec.PerSec)
		r.ZeroCostRatio = HeartbeatRatio(mc.ZeroCostPerSec, ec.ZeroCostPerSec)
	}
	switch {
	case !mc.Found || !ec.Found:
		r.Target = "not judged: a store has no ceiling (its first step failed)"
	case r.Ratio >= HeartbeatTargetRatio && !ec.AtLeast:
		r.Target = fmt.Sprintf("MET: meganode %.2f× stock (target ≥ %.1f×)", r.Ratio, HeartbeatTargetRatio)
	case mc.Bound == HeartbeatAPIServer && ec.Bound == HeartbeatAPIServer:
		r.Target = fmt.Sprintf("meganode %.2f× stock (target ≥ %.1f×), and kube-apiserver bounds both (the most CPU per renewal on both stacks)",
			r.Ratio, HeartbeatTargetRatio)
	default:
		r.Target = fmt.Sprintf("NOT MET: meganode %.2f× stock (target ≥ %.1f×); bound by %s (meganode) and %s (etcd)",
			r.Ratio, HeartbeatTargetRatio, mc.Bound, ec.Bound)
	}
	if mc.AtLeast || ec.AtLeast {
		r.Notes = append(r.Notes, "a store held every rate asked: its ceiling is at least the figure shown (raise --rates)")
	}
}

func optMs(v *float64) string {
	if v == nil {
		return "missing"
	}
	return fmt.Sprintf("%.3f", *v)
}

// Summary is the text report.
func (r *HeartbeatReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "heartbeat ceiling: %d node Leases renewed through kube-apiserver (Update of the cached Lease, Get on conflict, as the kubelet), rate stepped; %.0f s per step after %.0f s warm-up; a step holds with lease PUT p99 ≤ %.0f ms, no failed renewal and ≥ %.0f%% of the asked rate; %d cores shared by every process\n",
		r.Leases, r.StepSeconds, r.WarmupSeconds, r.P99LimitMs, HeartbeatMinAchieved*100, r.Cores)
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "\n%s (%d leases over %d connections)\n", storeTitle(run.Store), run.Leases, run.Connections)
		if run.Error != "" {
			fmt.Fprintf(&b, "  RUN FAILED: %s\n", run.Error)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ASKED/s\tACHIEVED/s\tPUT p50\tp99\tmax\tapiserver PUT p50\tp99\tERRORS\tCONFLICTS\tSKIPPED\tcores: apiserver\tstore\tgenerator\tother procs\tmachine\tms CPU/renewal: apiserver\tstore\tgenerator\tRSS apiserver\tstore\tVERDICT")
		for _, s := range run.Steps {
			srv50, srv99 := "missing", "missing"
			if s.Server != nil && s.Server.Count > 0 {
				srv50, srv99 = hbMs(s.Server.P50Ms), hbMs(s.Server.P99Ms)
			}
			var others float64
			for _, p := range s.Procs {
				if p.Name != HeartbeatAPIServer && p.Name != HeartbeatStore && p.Name != HeartbeatGenerator {
					others += p.Cores
				}
			}
			cores := func(n string) string {
				if p := s.Proc(n); p != nil {
					return fmt.Sprintf("%.2f", p.Cores)
				}
				return "missing"
			}
			per := func(n string) string {
				if p := s.Proc(n); p != nil {
					return optMs(p.CPUMsPerRenewal)
				}
				return "missing"
			}
			rss := func(n string) string {
				if p := s.Proc(n); p != nil {
					return FmtBytes(float64(p.RSSBytes))
				}
				return "missing"
			}
			fmt.Fprintf(tw, "  %.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\n",
				s.AskedPerSec, s.AchievedPerSec, hbMs(s.PutP50Ms), hbMs(s.PutP99Ms), hbMs(s.PutMaxMs), srv50, srv99,
				s.Errors, s.Conflicts, s.Skipped, cores(HeartbeatAPIServer), cores(HeartbeatStore), cores(HeartbeatGenerator), others, s.HostBusyCores,
				per(HeartbeatAPIServer), per(HeartbeatStore), per(HeartbeatGenerator), rss(HeartbeatAPIServer), rss(HeartbeatStore), s.Verdict)
		}
		tw.Flush()
		for _, s := range run.Steps {
			for _, e := range s.ErrorKinds {
				fmt.Fprintf(&b, "  errors at %.0f/s: %d× %s\n", s.AskedPerSec, e.Count, e.Error)
			}
			if s.ServerError != "" {
				fmt.Fprintf(&b, "  kube-apiserver metrics at %.0f/s: %s\n", s.AskedPerSec, s.ServerError)
			}
		}
		b.WriteString(ceilingText(run.Ceiling))
	}
	if len(r.Runs) == 2 {
		fmt.Fprintln(&b)
		m, e := r.Run(TargetMeganode), r.Run(TargetEtcd)
		if m != nil && e != nil {
			fmt.Fprintf(&b, "ceiling meganode / stock: %s (%s vs %s renewals/s); zero-cost generator: %s (%s vs %s)\n",
				ratioText(r.Ratio), rateText(m.Ceiling), rateText(e.Ceiling), ratioText(r.ZeroCostRatio),
				zeroText(m.Ceiling), zeroText(e.Ceiling))
		}
	}
	fmt.Fprintf(&b, "target: %s\n", r.Target)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func storeTitle(s string) string {
	switch s {
	case TargetMeganode:
		return "meganode-store under kube-apiserver"
	case TargetEtcd:
		return "etcd 3.6 (stock) under kube-apiserver"
	}
	return s
}

func ratioText(v float64) string {
	if v <= 0 {
		return "missing"
	}
	return fmt.Sprintf("%.2f×", v)
}

func rateText(c HeartbeatCeiling) string {
	if !c.Found {
		return "missing"
	}
	s := fmt.Sprintf("%.0f", c.PerSec)
	if c.AtLeast {
		s = "≥ " + s
	}
	return s
}

func zeroText(c HeartbeatCeiling) string {
	if c.ZeroCostPerSec <= 0 {
		return "missing"
	}
	return fmt.Sprintf("%.0f", c.ZeroCostPerSec)
}

func ceilingText(c HeartbeatCeiling) string {
	var b strings.Builder
	if !c.Found {
		fmt.Fprintf(&b, "  ceiling: missing — the first step (%.0f/s) did not hold: %s\n", c.FirstFailedPerSec, c.FirstFailedWhy)
		return b.String()
	}
	at := ""
	if c.AtLeast {
		at = "at least "
	}
	fmt.Fprintf(&b, "  ceiling: %s%.0f renewals/s held (asked %.0f/s) with lease PUT p99 ≤ 1 s = %s%.0f nodes at the kubelet's 10 s renewal (40 s lease)\n",
		at, c.PerSec, c.AskedPerSec, at, c.Nodes)
	if c.FirstFailedPerSec > 0 {
		fmt.Fprintf(&b, "  next step %.0f/s did not hold: %s\n", c.FirstFailedPerSec, c.FirstFailedWhy)
	}
	names := make([]string, 0, len(c.CPUMsPerRenewal))
	for n := range c.CPUMsPerRenewal {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return c.CPUMsPerRenewal[names[i]] > c.CPUMsPerRenewal[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.3f", n, c.CPUMsPerRenewal[n])
	}
	fmt.Fprintf(&b, "  CPU per renewal at the ceiling, ms: %s\n", strings.Join(parts, ", "))
	if c.ZeroCostPerSec > 0 {
		fmt.Fprintf(&b, "  zero-cost generator: %d cores / %.3f ms (kube-apiserver + store) = %.0f renewals/s = %.0f nodes\n",
			c.Cores, c.ServerCPUMs, c.ZeroCostPerSec, c.ZeroCostNodes)
	} else {
		fmt.Fprintf(&b, "  zero-cost generator: missing (no CPU figures)\n")
	}
	if c.APIServerOnlyPerSec > 0 {
		fmt.Fprintf(&b, "  zero-cost store and generator: %d cores / %.3f ms (kube-apiserver alone) = %.0f renewals/s = %.0f nodes\n",
			c.Cores, c.CPUMsPerRenewal[HeartbeatAPIServer], c.APIServerOnlyPerSec, c.APIServerOnlyPerSec*HeartbeatRenewSeconds)
	}
	fmt.Fprintf(&b, "  bound: %s (%s)\n", c.Bound, c.BoundNote)
	return b.String()
}

// Charts: lease PUT p99 against the asked rate for each store (the SLO as a dashed line), and
// the achieved rate against the asked.
func (r *HeartbeatReport) Charts() []NamedChart {
	// The rates some store ran (stepping stops at the first step that fails).
	ran := map[float64]bool{}
	for _, run := range r.Runs {
		for _, s := range run.Steps {
			ran[s.AskedPerSec] = true
		}
	}
	var rates []float64
	for _, v := range r.Rates {
		if ran[v] {
			rates = append(rates, v)
		}
	}
	sort.Float64s(rates)
	x := make([]string, len(rates))
	for i, v := range rates {
		x[i] = strconv.FormatFloat(v, 'f', -1, 64)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	p99 := &Chart{Title: fmt.Sprintf("lease PUT p99 through kube-apiserver, %d leases, %d cores", r.Leases, r.Cores),
		XLabel: "renewals/s asked", YLabel: "ms", X: x, LogY: true, Format: func(v float64) string { return num(math.Round(v*10) / 10) }}
	ach := &Chart{Title: "renewals/s achieved", XLabel: "renewals/s asked", YLabel: "renewals/s", X: x, Format: func(v float64) string { return num(math.Round(v)) }}
	for _, run := range r.Runs {
		pv, av := make([]float64, len(rates)), make([]float64, len(rates))
		for i, rate := range rates {
			pv[i], av[i] = math.NaN(), math.NaN()
			for _, s := range run.Steps {
				if s.AskedPerSec == rate && s.Puts > 0 {
					pv[i], av[i] = s.PutP99Ms, s.AchievedPerSec
				}
			}
		}
		p99.Series = append(p99.Series, Series{Name: run.Store, Values: pv, Color: targetColor(run.Store)})
		ach.Series = append(ach.Series, Series{Name: run.Store, Values: av, Color: targetColor(run.Store)})
	}
	slo := make([]float64, len(rates))
	asked := make([]float64, len(rates))
	for i := range slo {
		slo[i] = r.P99LimitMs
		asked[i] = rates[i]
	}
	p99.Series = append(p99.Series, Series{Name: "SLO 1 s", Values: slo, Color: colOther, Dashed: true})
	ach.Series = append(ach.Series, Series{Name: "asked", Values: asked, Color: colOther, Dashed: true})
	return []NamedChart{{Slug: "heartbeat-p99", Name: "heartbeat", Chart: p99}, {Slug: "heartbeat-achieved", Name: "heartbeat", Chart: ach}}
}

// WriteHeartbeat writes heartbeat.json, summary.txt and the charts (PNG) into dir.
func WriteHeartbeat(dir string, r *HeartbeatReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "heartbeat.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(r.Summary()), 0o644); err != nil {
		return err
	}
	return WritePNGs(dir, r.Charts())
}
