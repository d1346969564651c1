package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// ResultsFile is the name of the JSON results in an output directory.
const ResultsFile = "results.json"

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadReport reads results.json (path may be the file or its directory).
func ReadReport(path string) (*Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ResultsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// FmtUs formats microseconds for people.
func FmtUs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 1000:
		return fmt.Sprintf("%.0f µs", v)
	case v < 1e6:
		return trimZeros(fmt.Sprintf("%.2f", v/1e3)) + " ms"
	default:
		return trimZeros(fmt.Sprintf("%.2f", v/1e6)) + " s"
	}
}

// trimZeros turns "100.00" into "100" and "2.50" into "2.5".
func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// FmtBytes formats a byte count.
func FmtBytes(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.0f MiB", v/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	}
}

func fmtX(v float64) string {
	if v == 0 || math.IsNaN(v) {
		return "-"
	}
	if v < 0.1 {
		return fmt.Sprintf("%.3f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtCPU(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// WriteTable prints the one-screen summary: medians per point, then ratios.
func WriteTable(w io.Writer, rep *Report) {
	sums := Summarize(rep.Runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tclients\ttarget\trounds\tops/s\tp50\tp90\tp99\tp99.9\tmax\tsrv µs/op\tcli µs/op\tsrv peak RSS\terrors\tothers\t")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.2f\t\n", s.Name(), s.Clients, s.Target, s.Rounds,
			HumanRate(s.OpsPerSec), FmtUs(s.P50Us), FmtUs(s.P90Us), FmtUs(s.P99Us), FmtUs(s.P999Us), FmtUs(s.MaxUs),
			fmtCPU(s.ServerCPUPerOpUs), fmtCPU(s.ClientCPUPerOpUs), FmtBytes(s.PeakRSSBytes), s.Errors, s.OtherCores)
	}
	tw.Flush()
	var extra []string
	for _, s := range sums {
		if s.Members > 1 {
			extra = append(extra, fmt.Sprintf("%s %s c=%d: srv µs/op and peak RSS are summed over the %d members' processes; "+
				"the largest member's peak RSS %s", s.Name(), s.Target, s.Clients, s.Members, FmtBytes(s.MaxMemberPeakRSSBytes)))
		}
		switch s.Workload {
		case "watch":
			extra = append(extra, fmt.Sprintf("watch %s c=%d: %s events/s to %.0f watchers, write→event p50 %s p99 %s, %.0f missing, %.1f µs server CPU/event",
				s.Target, s.Clients, HumanRate(s.Extra["events_per_sec"]), paramWatchers(rep, s), FmtUs(s.Extra["delay_p50_us"]),
				FmtUs(s.Extra["delay_p99_us"]), s.Extra["events_missing"], s.Extra["server_cpu_per_event_us"]))
		case "range":
			extra = append(extra, fmt.Sprintf("range %s c=%d: full list at latest p50 %s p99 %s, at old revision p50 %s p99 %s, %s keys/s",
				s.Target, s.Clients, FmtUs(s.Extra["list_latest_p50_us"]), FmtUs(s.Extra["list_latest_p99_us"]),
				FmtUs(s.Extra["list_old_p50_us"]), FmtUs(s.Extra["list_old_p99_us"]), HumanRate(s.Extra["keys_per_sec"])))
		case "lease-flood":
			if s.Extra["conflicts"] > 0 {
				extra = append(extra, fmt.Sprintf("lease-flood %s c=%d: %.0f conflicts", s.Target, s.Clients, s.Extra["conflicts"]))
			}
			if s.Extra["txn_put_revision_zero"] > 0 {
				extra = append(extra, fmt.Sprintf("WARNING lease-flood %s c=%d: %.0f Txn put responses carried revision 0 "+
					"(etcd sets it; kube-apiserver reads the new resourceVersion from it)", s.Target, s.Clients, s.Extra["txn_put_revision_zero"]))
			}
		}
	}
	if len(extra) > 0 {
		fmt.Fprintln(w)
		for _, e := range extra {
			fmt.Fprintln(w, e)
		}
	}
	if cmp := Compare(sums); len(cmp) > 0 {
		fmt.Fprintln(w, "\nmeganode / etcd (medians):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\tclients\tthroughput\tserver CPU/op\tp99\tpeak RSS\t")
		for _, c := range cmp {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", c.Label(), c.Clients, fmtX(c.ThroughputX()), fmtX(c.CPUX()),
				fmtX(c.P99X()), fmtX(c.RSSX()))
		}
		tw.Flush()
	}
	if n, worst := noisyRuns(rep); n > 0 {
		fmt.Fprintf(w, "\nnote: in %d run(s) other processes kept up to %.2f cores busy (column \"others\"): those figures are noisy\n", n, worst)
	}
	for _, f := range rep.Failures {
		fmt.Fprintln(w, "FAILED:", f)
	}
}

// noisyRuns counts runs during which other processes used more than a quarter
// of a core, and the worst such figure.
func noisyRuns(rep *Report) (n int, worst float64) {
	for _, r := range rep.Runs {
		if r.OtherCores > 0.25 {
			n++
		}
		worst = math.Max(worst, r.OtherCores)
	}
	return n, worst
}

func paramWatchers(rep *Report, s *Summary) float64 {
	for _, r := range rep.Runs {
		if r.Workload == s.Workload && r.Target == s.Target && r.Clients == s.Clients {
			if v, ok := r.Params["watchers"].(float64); ok {
				return v
			}
			if v, ok := r.Params["watchers"].(int); ok {
				return float64(v)
			}
		}
	}
	return 0
}

// NamedChart is a chart with the file name (without extension) it is saved as.
type NamedChart struct {
	Slug  string
	Name  string // the workload (with label) it belongs to
	Chart *Chart
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// Charts builds, per workload, throughput, latency and server-CPU charts against
// the number of clients, one line per target.
func Charts(rep *Report) []NamedChart {
	sums := Summarize(rep.Runs)
	var names []string
	byName := map[string][]*Summary{}
	for _, s := range sums {
		if _, ok := byName[s.Name()]; !ok {
			names = append(names, s.Name())
		}
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	var out []NamedChart
	for _, name := range names {
		ss := byName[name]
		var clients []int
		var targets []string
		seenC, seenT := map[int]bool{}, map[string]bool{}
		for _, s := range ss {
			if !seenC[s.Clients] {
				seenC[s.Clients] = true
				clients = append(clients, s.Clients)
			}
			if !seenT[s.Target] {
				seenT[s.Target] = true
				targets = append(targets, s.Target)
			}
		}
		sort.Ints(clients)
		sort.Slice(targets, func(i, j int) bool { return targetOrder(targets[i]) < targetOrder(targets[j]) })
		xs := make([]string, len(clients))
		for i, c := range clients {
			xs[i] = fmt.Sprint(c)
		}
		series := func(t string, f func(*Summary) float64) []float64 {
			v := make([]float64, len(clients))
			for i, c := range clients {
				v[i] = math.NaN()
				for _, s := range ss {
					if s.Target == t && s.Clients == c {
						v[i] = f(s)
					}
				}
			}
			return v
		}
		unit := "ops/s"
		switch ss[0].Workload {
		case "put":
			unit = "puts/s"
		case "lease-flood":
			unit = "lease renewals/s (Txn)"
		case "watch":
			unit = "writes/s"
		case "range":
			unit = "pages/s (500 keys)"
		}
		styles := "p99 solid, p50 dashed"
		if len(xs) == 1 {
			styles = "p99, then p50 lighter"
		}
		tp := &Chart{Title: name + ": throughput vs clients", XLabel: "clients", YLabel: unit, X: xs}
		lat := &Chart{Title: name + ": latency vs clients (" + styles + ")", XLabel: "clients", YLabel: "latency", X: xs,
			LogY: true, Format: FmtUs}
		cpu := &Chart{Title: name + ": server CPU per operation", XLabel: "clients", YLabel: "server CPU µs per op", X: xs,
			Format: func(v float64) string { return fmt.Sprintf("%.1f", v) }}
		for _, t := range targets {
			col := targetColor(t)
			tp.Series = append(tp.Series, Series{Name: t, Values: series(t, func(s *Summary) float64 { return s.OpsPerSec }), Color: col})
			lat.Series = append(lat.Series,
				Series{Name: t + " p99", Values: series(t, func(s *Summary) float64 { return s.P99Us }), Color: col},
				Series{Name: t + " p50", Values: series(t, func(s *Summary) float64 { return s.P50Us }), Color: col, Dashed: true})
			cpu.Series = append(cpu.Series, Series{Name: t, Values: series(t, func(s *Summary) float64 { return s.ServerCPUPerOpUs }), Color: col})
		}
		base := slug(name)
		out = append(out, NamedChart{base + "-throughput", name, tp}, NamedChart{base + "-latency", name, lat},
			NamedChart{base + "-cpu", name, cpu})
		if ss[0].Workload == "watch" {
			ev := &Chart{Title: name + ": events delivered per second", XLabel: "writers (clients)", YLabel: "events/s", X: xs}
			dl := &Chart{Title: name + ": write→event delay (" + styles + ")", XLabel: "writers (clients)", YLabel: "delay",
				X: xs, LogY: true, Format: FmtUs}
			for _, t := range targets {
				col := targetColor(t)
				ev.Series = append(ev.Series, Series{Name: t, Values: series(t, func(s *Summary) float64 { return s.Extra["events_per_sec"] }), Color: col})
				dl.Series = append(dl.Series,
					Series{Name: t + " p99", Values: series(t, func(s *Summary) float64 { return s.Extra["delay_p99_us"] }), Color: col},
					Series{Name: t + " p50", Values: series(t, func(s *Summary) float64 { return s.Extra["delay_p50_us"] }), Color: col, Dashed: true})
			}
			out = append(out, NamedChart{base + "-events", name, ev}, NamedChart{base + "-delay", name, dl})
		}
	}
	return out
}

// WritePNGs saves every chart as dir/<slug>.png.
func WritePNGs(dir string, charts []NamedChart) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range charts {
		b, err := c.Chart.PNG()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Slug+".png"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteOutputs writes results.json, summary.txt, the PNG charts and report.html into dir.
func WriteOutputs(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := rep.WriteJSON(filepath.Join(dir, ResultsFile)); err != nil {
		return err
	}
	var sb strings.Builder
	WriteTable(&sb, rep)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sb.String()), 0o644); err != nil {
		return err
	}
	charts := Charts(rep)
	if err := WritePNGs(dir, charts); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	WriteHTML(f, rep, charts)
	return f.Close()
}

// WriteHTML writes a self-contained page: summary, charts as inline SVG, every run.
func WriteHTML(w io.Writer, rep *Report, charts []NamedChart) {
	esc := html.EscapeString
	fmt.Fprintf(w, `<!doctype html>
<html><head><meta charset="utf-8"><title>meganode bench</title>
<style>
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:12px}
.fail{color:#b00}
svg{display:block;margin:1em 0;border:1px solid #eee}
</style></head><body>
<h1>meganode bench</h1>
<p>%s · %d CPUs (%s) · kernel %s · %s · generated %s</p>
`, esc(rep.Meta.Host), rep.Meta.CPUs, esc(rep.Meta.CPUModel), esc(rep.Meta.Kernel), esc(rep.Meta.GoVersion),
		rep.Meta.Generated.Format("2006-01-02 15:04 MST"))
	for _, c := range rep.Meta.Commands {
		fmt.Fprintf(w, "<pre>%s</pre>\n", esc(c))
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "<p class=fail>FAILED: %s</p>\n", esc(f))
	}
	var sb strings.Builder
	WriteTable(&sb, rep)
	fmt.Fprintf(w, "<h2>Summary (medians over rounds)</h2>\n<pre>%s</pre>\n", esc(sb.String()))
	fmt.Fprintln(w, "<h2>Charts</h2>")
	for _, c := range charts {
		fmt.Fprintln(w, c.Chart.SVG())
	}
	fmt.Fprintln(w, "<h2>Every run</h2>\n<table><tr><th>workload</th><th>target</th><th>clients</th><th>conns</th><th>round</th>"+
		"<th>ops</th><th>s</th><th>ops/s</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th><th>server µs/op</th>"+
		"<th>client µs/op</th><th>server peak RSS</th><th>errors</th></tr>")
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%.1f</td><td>%s</td>"+
			"<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td></tr>\n",
			esc(r.Name()), esc(r.Target), r.Clients, r.Conns, r.Round, r.Ops, r.DurationS, HumanRate(r.OpsPerSec),
			FmtUs(r.Latency.P50Us), FmtUs(r.Latency.P99Us), FmtUs(r.Latency.P999Us), FmtUs(r.Latency.MaxUs),
			fmtCPU(r.ServerCPUPerOpUs), fmtCPU(r.ClientCPUPerOpUs), FmtBytes(float64(r.Server.PeakRSS)), r.Errors)
	}
	fmt.Fprintln(w, "</table></body></html>")
}

// Goal is one of issue 4's targets, checked against the figures.
type Goal struct {
	What     string
	Want     string
	Measured string
	Met      string // "yes", "no" or "not measured"
}

// Goals checks the ratios against a report.
func Goals(rep *Report) []Goal {
	cmp := Compare(Summarize(rep.Runs))
	find := func(names []string, clients int) *Comparison {
		var best *Comparison
		for i := range cmp {
			c := &cmp[i]
			if c.Members > 1 { // issue 4's goals are one server's
				continue
			}
			ok := false
			for _, n := range names {
				ok = ok || c.Name == n
			}
			if !ok {
				continue
			}
			if clients > 0 && c.Clients == clients {
				return c
			}
			if clients == 0 && (best == nil || c.Clients > best.Clients) {
				best = c
			}
		}
		if clients > 0 {
			return nil
		}
		return best
	}
	goal := func(what, want string, c *Comparison, v func(Comparison) float64, ok func(float64) bool) Goal {
		g := Goal{What: what, Want: want, Met: "not measured", Measured: "-"}
		if c == nil || v(*c) == 0 {
			return g
		}
		x := v(*c)
		g.Measured = fmt.Sprintf("%s (%d clients)", fmtX(x), c.Clients)
		g.Met = "no"
		if ok(x) {
			g.Met = "yes"
		}
		return g
	}
	putB := find([]string{"put", "put (buffered)"}, 0)
	lf := find([]string{"lease-flood"}, 0)
	putF := find([]string{"put (fsync)"}, 0)
	p100 := find([]string{"put", "put (buffered)"}, 100)
	le := func(lim float64) func(float64) bool { return func(x float64) bool { return x <= lim } }
	ge := func(lim float64) func(float64) bool { return func(x float64) bool { return x >= lim } }
	return []Goal{
		goal("put, buffered: server CPU per put vs etcd (tmpfs)", "≤ 0.125×", putB, Comparison.CPUX, le(0.125)),
		goal("put, buffered: throughput vs etcd (tmpfs)", "≥ 2×", putB, Comparison.ThroughputX, ge(2)),
		goal("lease-flood (apiserver Txn): server CPU per write vs etcd", "≤ 0.125×", lf, Comparison.CPUX, le(0.125)),
		goal("lease-flood (apiserver Txn): throughput vs etcd", "≥ 2×", lf, Comparison.ThroughputX, ge(2)),
		goal("put, fsync, same disk: server CPU per put vs etcd on disk", "≤ 0.25×", putF, Comparison.CPUX, le(0.25)),
		goal("put, fsync, same disk: throughput vs etcd on disk", "≥ 1.8×", putF, Comparison.ThroughputX, ge(1.8)),
		goal("put: p99 latency at 100 clients vs etcd", "≤ 0.33×", p100, Comparison.P99X, le(1.0/3)),
		memoryGoal(rep.Memory),
	}
}

func memoryGoal(m *MemoryResult) Goal {
	g := Goal{What: "memory after 1M Lease-sized keys × 10 updates, compacted", Want: "≤ 0.5× etcd RSS + db file",
		Measured: "-", Met: "not measured"}
	x := m.Ratio()
	if x == 0 {
		return g
	}
	g.Measured = fmt.Sprintf("%s (%d keys × %d: %.0f MiB vs %.0f + %.0f MiB)", fmtX(x), m.Keys, m.Updates, m.MeganodeRSS, m.EtcdRSS, m.EtcdDB)
	g.Met = "no"
	if x <= 0.5 {
		g.Met = "yes"
		if m.Keys < 1000000 {
			g.Met = "yes at this size"
		}
	}
	return g
}

// WriteMarkdown writes the benchmark page; chartPrefix is the path from the
// markdown file to the PNG charts (e.g. "bench/").
func WriteMarkdown(w io.Writer, rep *Report, charts []NamedChart, chartPrefix string) {
	m := rep.Meta
	fmt.Fprintf(w, "# Benchmarks: meganode-store against etcd\n\n")
	fmt.Fprintf(w, "_Generated by `meganode bench report` from `%sresults.json` on %s. Every figure below comes from "+
		"that run; nothing here is typed by hand. Regenerate with `make bench`._\n\n", chartPrefix, m.Generated.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s, %d CPUs (%s), kernel %s, %s. The load generator runs on the same cores as the server, "+
		"so throughput is capped by the client; **server CPU per operation** (utime+stime of the server process from "+
		"/proc, divided by the operations completed) is the figure that describes the server. etcd is v3.6.16 built from "+
		"its Go modules and run as its own process (`meganode etcd`); both servers start fresh for every run, and targets "+
		"alternate A/B/A/B; tables show medians over the rounds.\n\n", m.Host, m.CPUs, m.CPUModel, m.Kernel, m.GoVersion)
	fmt.Fprintln(w, "Commands:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "```")
	for _, c := range m.Commands {
		fmt.Fprintln(w, c)
	}
	fmt.Fprintln(w, "```")
	fmt.Fprintln(w)
	if n, worst := noisyRuns(rep); n > 0 {
		fmt.Fprintf(w, "**Noisy run:** in %d of %d runs other processes on this machine kept more than a quarter of a core busy "+
			"(up to %.2f cores; column \"other procs\"), so throughput and latency there are lower than the servers allow; "+
			"CPU per operation is less affected.\n\n", n, len(rep.Runs), worst)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintln(w, "**Failed runs:**")
		fmt.Fprintln(w)
		for _, f := range rep.Failures {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(f, "\n", " "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "## Goals (issue 4)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| goal | want | measured (meganode / etcd) | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, g := range Goals(rep) {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.What, g.Want, g.Measured, g.Met)
	}
	fmt.Fprintln(w)

	if rep.State != nil {
		writeStateMarkdown(w, rep.State)
	}
	sums := Summarize(rep.Runs)
	cmp := Compare(sums)
	var names []string
	seen := map[string]bool{}
	for _, s := range sums {
		if !seen[s.Name()] {
			seen[s.Name()] = true
			names = append(names, s.Name())
		}
	}
	for _, name := range names {
		fmt.Fprintf(w, "## %s\n\n", name)
		fmt.Fprintln(w, "| clients | target | rounds | ops/s | p50 | p90 | p99 | p99.9 | max | server µs/op | client µs/op | server peak RSS | errors | other procs (cores) |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		var workload string
		for _, s := range sums {
			if s.Name() != name {
				continue
			}
			workload = s.Workload
			fmt.Fprintf(w, "| %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %.2f |\n", s.Clients, s.Target, s.Rounds,
				HumanRate(s.OpsPerSec), FmtUs(s.P50Us), FmtUs(s.P90Us), FmtUs(s.P99Us), FmtUs(s.P999Us), FmtUs(s.MaxUs),
				fmtCPU(s.ServerCPUPerOpUs), fmtCPU(s.ClientCPUPerOpUs), FmtBytes(s.PeakRSSBytes), s.Errors, s.OtherCores)
		}
		fmt.Fprintln(w)
		switch workload {
		case "watch":
			fmt.Fprintln(w, "| writers | target | events/s delivered | write→event p50 | p99 | p99.9 | missing events | server µs/event |")
			fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|")
			for _, s := range sums {
				if s.Name() == name {
					fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %.0f | %.2f |\n", s.Clients, s.Target, HumanRate(s.Extra["events_per_sec"]),
						FmtUs(s.Extra["delay_p50_us"]), FmtUs(s.Extra["delay_p99_us"]), FmtUs(s.Extra["delay_p999_us"]),
						s.Extra["events_missing"], s.Extra["server_cpu_per_event_us"])
				}
			}
			fmt.Fprintln(w)
		case "range":
			fmt.Fprintln(w, "| clients | target | full list, latest p50 | p99 | full list, old revision p50 | p99 | keys/s |")
			fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|")
			for _, s := range sums {
				if s.Name() == name {
					fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", s.Clients, s.Target,
						FmtUs(s.Extra["list_latest_p50_us"]), FmtUs(s.Extra["list_latest_p99_us"]),
						FmtUs(s.Extra["list_old_p50_us"]), FmtUs(s.Extra["list_old_p99_us"]), HumanRate(s.Extra["keys_per_sec"]))
				}
			}
			fmt.Fprintln(w)
		}
		for _, s := range sums {
			if s.Name() == name && s.Extra["txn_put_revision_zero"] > 0 {
				fmt.Fprintf(w, "**Incompatibility:** %s at %d clients answered %.0f successful Txns with revision 0 in the put "+
					"response's header (etcd sets it; kube-apiserver takes the new resourceVersion from it).\n\n",
					s.Target, s.Clients, s.Extra["txn_put_revision_zero"])
			}
		}
		var rows []Comparison
		for _, c := range cmp {
			if c.Name == name {
				rows = append(rows, c)
			}
		}
		if len(rows) > 0 {
			fmt.Fprintln(w, "meganode / etcd:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| clients | throughput | server CPU per op | p99 latency | server peak RSS |")
			fmt.Fprintln(w, "|---:|---:|---:|---:|---:|")
			for _, c := range rows {
				clients := fmt.Sprint(c.Clients)
				if c.Members > 1 {
					clients += fmt.Sprintf(" (%d members each)", c.Members)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", clients, fmtX(c.ThroughputX()), fmtX(c.CPUX()), fmtX(c.P99X()), fmtX(c.RSSX()))
			}
			fmt.Fprintln(w)
		}
		for _, c := range charts {
			if c.Name == name {
				fmt.Fprintf(w, "![%s](%s%s.png)\n", c.Chart.Title, chartPrefix, c.Slug)
			}
		}
		fmt.Fprintln(w)
	}
}
