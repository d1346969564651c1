package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

// The Kubernetes scalability SLO thresholds (design §5).
const (
	SLOMutatingSeconds   = 1.0  // single-object and mutating calls
	SLONamespaceList     = 5.0  // LIST in a namespace
	SLOClusterList       = 30.0 // LIST across the cluster
	SLOPodStartupSeconds = 5.0
)

// APILatency is one verb/resource row from apiserver_request_duration_seconds.
type APILatency struct {
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	Subresource string  `json:"subresource,omitempty"`
	Scope       string  `json:"scope"`
	Count       float64 `json:"count"`
	PerSec      float64 `json:"per_sec"`
	P50         float64 `json:"p50_seconds"`
	P99         float64 `json:"p99_seconds"`
	SLO         float64 `json:"slo_seconds"`
	OK          bool    `json:"ok"`
}

// StoreOp is one store operation as kube-apiserver saw it (etcd_request_duration_seconds).
type StoreOp struct {
	Operation string  `json:"operation"`
	Count     float64 `json:"count"`
	PerSec    float64 `json:"per_sec"`
	P50       float64 `json:"p50_seconds"`
	P99       float64 `json:"p99_seconds"`
}

// APIErrorCount is how many requests kube-apiserver answered with one error code
// (apiserver_request_total, code ≥ 400) for a verb and resource in the window, all clients.
type APIErrorCount struct {
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	Subresource string  `json:"subresource,omitempty"`
	Code        string  `json:"code"`
	Count       float64 `json:"count"`
}

// StoreErrorCount is kube-apiserver's failed store requests by operation and resource
// (etcd_request_errors_total) in the window.
type StoreErrorCount struct {
	Operation string  `json:"operation"`
	Group     string  `json:"group,omitempty"`
	Resource  string  `json:"resource"`
	Count     float64 `json:"count"`
}

// Usage is one component's CPU and memory over the window.
type Usage struct {
	Name       string  `json:"name"`
	Pid        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"` // of one core, averaged over the window
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// RatePoint is a rate at a moment.
type RatePoint struct {
	Seconds float64 `json:"t"`
	PerSec  float64 `json:"per_sec"`
}

// Report is the SLO report of one measured window.
type Report struct {
	Store       string       `json:"store"`
	StoreShards int          `json:"store_shards"`
	StoreNames  []string     `json:"store_components"` // the store processes among Components
	Nodes       int          `json:"nodes"`
	ReadyNodes  int          `json:"ready_nodes"`
	Start       time.Time    `json:"start"`
	Seconds     float64      `json:"seconds"`
	Pods        *PodRun      `json:"pods,omitempty"`
	API         []APILatency `json:"api_latency"`
	// APIByVerb is the same latency per verb over every resource (the demo's comparison rows:
	// per verb/resource rows differ between schedulers, per verb they line up).
	APIByVerb         []APILatency      `json:"api_latency_by_verb"`
	APISLOMet         bool              `json:"api_slo_met"`
	PodStartupSLOMet  bool              `json:"pod_startup_slo_met"`
	APIErrors         []APIErrorCount   `json:"api_errors,omitempty"`
	StoreErrors       []StoreErrorCount `json:"store_errors,omitempty"`
	StoreOps          []StoreOp         `json:"store_ops"`
	StoreOpsPerSec    float64           `json:"store_ops_per_sec"`
	StoreP99          float64           `json:"store_p99_seconds"`
	LeaseWritesPerSec float64           `json:"lease_writes_per_sec"`
	LeaseTimeline     []RatePoint       `json:"lease_writes_timeline"`
	Components        []Usage           `json:"components"`
	Notes             []string          `json:"notes,omitempty"`
}

// Recorder measures a window: apiserver metrics at both ends, lease write rate and RSS while it runs.
type Recorder struct {
	st      *State
	client  *http.Client
	before  *Snapshot
	start   time.Time
	watches map[string]*bench.ProcWatch
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	leases  []RatePoint
}

var metricPrefixes = []string{"apiserver_request_duration_seconds", "apiserver_request_total", "etcd_request_duration_seconds", "etcd_request_errors_total"}

// StartRecorder takes the first snapshot and starts sampling every interval.
func StartRecorder(ctx context.Context, st *State, interval time.Duration) (*Recorder, error) {
	c, err := AdminHTTPClient(st)
	if err != nil {
		return nil, err
	}
	r := &Recorder{st: st, client: c, watches: map[string]*bench.ProcWatch{}, stop: make(chan struct{}), done: make(chan struct{})}
	if r.before, err = Scrape(ctx, c, st.APIServerURL+"/metrics", metricPrefixes...); err != nil {
		return nil, err
	}
	r.start = time.Now()
	for _, comp := range st.Components {
		if comp.Alive() {
			r.watches[comp.Name] = bench.StartProcWatch(comp.Pid)
		}
	}
	go r.loop(ctx, interval)
	return r, nil
}

func leaseWrites(s *Snapshot) float64 {
	return s.Sum("apiserver_request_total", map[string]string{"resource": "leases", "verb": "PUT"}) +
		s.Sum("apiserver_request_total", map[string]string{"resource": "leases", "verb": "POST"})
}

func (r *Recorder) loop(ctx context.Context, interval time.Duration) {
	defer close(r.done)
	tk := time.NewTicker(interval)
	defer tk.Stop()
	prev, prevT := leaseWrites(r.before), r.before.At
	for {
		select {
		case <-r.stop:
			return
		case <-tk.C:
		}
		for _, w := range r.watches {
			w.Poll()
		}
		s, err := Scrape(ctx, r.client, r.st.APIServerURL+"/metrics", "apiserver_request_total")
		if err != nil {
			continue
		}
		lw := leaseWrites(s)
		if dt := s.At.Sub(prevT).Seconds(); dt > 0 && lw >= prev {
			r.mu.Lock()
			r.leases = append(r.leases, RatePoint{Seconds: s.At.Sub(r.start).Seconds(), PerSec: (lw - prev) / dt})
			r.mu.Unlock()
		}
		prev, prevT = lw, s.At
	}
}

// Stop takes the final snapshot and builds the report.
func (r *Recorder) Stop(ctx context.Context, pods *PodRun) (*Report, error) {
	close(r.stop)
	<-r.done
	after, err := Scrape(ctx, r.client, r.st.APIServerURL+"/metrics", metricPrefixes...)
	if err != nil {
		return nil, err
	}
	win := after.At.Sub(r.before.At).Seconds()
	rep := &Report{Store: r.st.Store, StoreShards: len(r.st.Shards), Nodes: r.st.Nodes, Start: r.start, Seconds: win, Pods: pods}
	for _, sh := range r.st.Shards {
		rep.StoreNames = append(rep.StoreNames, sh.Component)
	}
	if cs, err := Clientset(r.st); err == nil {
		total, ready, err := CountReadyNodes(ctx, cs)
		if err == nil {
			rep.Nodes, rep.ReadyNodes = total, ready
		}
	}
	// API call latency per verb/resource/subresource/scope.
	by := []string{"verb", "resource", "subresource", "scope"}
	d := Delta(after.Histograms("apiserver_request_duration_seconds", by...), r.before.Histograms("apiserver_request_duration_seconds", by...))
	rep.APISLOMet = true
	for k, h := range d {
		p := strings.Split(k, "|")
		verb := p[0]
		if verb == "WATCH" || verb == "WATCHLIST" || verb == "CONNECT" {
			continue
		}
		a := APILatency{Verb: verb, Resource: p[1], Subresource: p[2], Scope: p[3], Count: h.Count(), PerSec: h.Count() / win,
			P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
		switch {
		case verb == "LIST" && a.Scope == "namespace":
			a.SLO = SLONamespaceList
		case verb == "LIST":
			a.SLO = SLOClusterList
		default:
			a.SLO = SLOMutatingSeconds
		}
		a.OK = !(a.P99 > a.SLO)
		if !a.OK && a.Resource != "events" { // the SLO excludes events
			rep.APISLOMet = false
		}
		rep.API = append(rep.API, a)
	}
	sort.Slice(rep.API, func(i, j int) bool { return rep.API[i].Count > rep.API[j].Count })
	vd := Delta(after.Histograms("apiserver_request_duration_seconds", "verb"), r.before.Histograms("apiserver_request_duration_seconds", "verb"))
	for verb, h := range vd {
		if verb == "WATCH" || verb == "WATCHLIST" || verb == "CONNECT" {
			continue
		}
		rep.APIByVerb = append(rep.APIByVerb, APILatency{Verb: verb, Count: h.Count(), PerSec: h.Count() / win, P50: h.Quantile(0.5), P99: h.Quantile(0.99)})
	}
	sort.Slice(rep.APIByVerb, func(i, j int) bool { return rep.APIByVerb[i].Count > rep.APIByVerb[j].Count })
	rep.APIErrors = apiErrors(after, r.before)
	ops := []string{"operation", "group", "resource"}
	for k, n := range CounterDelta(after.Counters("etcd_request_errors_total", ops...), r.before.Counters("etcd_request_errors_total", ops...)) {
		p := strings.Split(k, "|")
		rep.StoreErrors = append(rep.StoreErrors, StoreErrorCount{Operation: p[0], Group: p[1], Resource: p[2], Count: n})
	}
	sort.Slice(rep.StoreErrors, func(i, j int) bool { return rep.StoreErrors[i].Count > rep.StoreErrors[j].Count })
	// Store requests as kube-apiserver issued them.
	sd := Delta(after.Histograms("etcd_request_duration_seconds", "operation"), r.before.Histograms("etcd_request_duration_seconds", "operation"))
	all := Delta(after.Histograms("etcd_request_duration_seconds"), r.before.Histograms("etcd_request_duration_seconds"))
	for k, h := range sd {
		rep.StoreOps = append(rep.StoreOps, StoreOp{Operation: k, Count: h.Count(), PerSec: h.Count() / win, P50: h.Quantile(0.5), P99: h.Quantile(0.99)})
	}
	sort.Slice(rep.StoreOps, func(i, j int) bool { return rep.StoreOps[i].Count > rep.StoreOps[j].Count })
	if h := all[""]; h != nil {
		rep.StoreOpsPerSec, rep.StoreP99 = h.Count()/win, h.Quantile(0.99)
	}
	lb, la := leaseWrites(r.before), leaseWrites(after)
	if la >= lb {
		rep.LeaseWritesPerSec = (la - lb) / win
	}
	r.mu.Lock()
	rep.LeaseTimeline = append([]RatePoint(nil), r.leases...)
	r.mu.Unlock()
	// CPU and memory of every component.
	for _, comp := range r.st.Components {
		w := r.watches[comp.Name]
		if w == nil {
			continue
		}
		u := w.Stop()
		if !u.Measured {
			rep.Notes = append(rep.Notes, comp.Name+": not measured (restarted or exited during the window)")
			continue
		}
		rep.Components = append(rep.Components, Usage{Name: comp.Name, Pid: comp.Pid, CPUSeconds: u.CPUMicros / 1e6,
			CPUPercent: 100 * u.CPUMicros / 1e6 / win, RSSMiB: float64(u.RSSBytes) / (1 << 20), PeakRSSMiB: float64(u.PeakRSS) / (1 << 20)})
	}
	rep.PodStartupSLOMet = pods == nil || (pods.Running == pods.Count && pods.StartupP99Sec <= SLOPodStartupSeconds)
	return rep, nil
}

// apiErrors: the requests answered with a code ≥ 400 between two scrapes, per verb, resource
// and code, most first.
func apiErrors(after, before *Snapshot) []APIErrorCount {
	by := []string{"verb", "resource", "subresource", "code"}
	var out []APIErrorCount
	for k, n := range CounterDelta(after.Counters("apiserver_request_total", by...), before.Counters("apiserver_request_total", by...)) {
		p := strings.Split(k, "|")
		if code, err := strconv.Atoi(p[3]); err != nil || code < 400 {
			continue
		}
		out = append(out, APIErrorCount{Verb: p[0], Resource: p[1], Subresource: p[2], Code: p[3], Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Verb+out[i].Resource+out[i].Subresource+out[i].Code < out[j].Verb+out[j].Resource+out[j].Subresource+out[j].Code
	})
	return out
}

func secs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 1:
		return fmt.Sprintf("%.0fms", v*1000)
	default:
		return fmt.Sprintf("%.2fs", v)
	}
}

func okMark(ok bool) string {
	if ok {
		return "OK"
	}
	return "MISSED"
}

// Print writes the one-screen table.
func (r *Report) Print(w io.Writer, maxAPIRows int) {
	fmt.Fprintf(w, "\nmeganode SLO report — store %s (%d shard(s)), %d nodes (%d Ready), window %.0fs\n",
		r.Store, r.StoreShards, r.Nodes, r.ReadyNodes, r.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if p := r.Pods; p != nil {
		rate := "unthrottled"
		if p.QPS > 0 {
			rate = fmt.Sprintf("%.0f/s", p.QPS)
		}
		fmt.Fprintf(tw, "pods (%s, created %s)\t%d created, %d scheduled, %d Running\n", p.Mode, rate, p.Count, p.Scheduled, p.Running)
		fmt.Fprintf(tw, "pod startup (create→Running)\tp50 %s  p90 %s  p99 %s  max %s\t[SLO p99 < 5s: %s]\n",
			secs(p.Startup.P50Us/1e6), secs(p.Startup.P90Us/1e6), secs(p.Startup.P99Us/1e6), secs(p.Startup.MaxUs/1e6), okMark(r.PodStartupSLOMet))
		fmt.Fprintf(tw, "pods scheduled/s\t%.1f (create phase %.1fs)\n", p.ScheduledPerSec, p.CreateSeconds)
	}
	fmt.Fprintf(tw, "lease writes/s\t%.1f\n", r.LeaseWritesPerSec)
	fmt.Fprintf(tw, "store ops/s (from apiserver)\t%.0f, p99 %s\n", r.StoreOpsPerSec, secs(r.StoreP99))
	tw.Flush()
	fmt.Fprintf(w, "\nAPI calls (p99 per verb/resource; SLO 1s single-object/mutating, 5s/30s LIST): %s\n", okMark(r.APISLOMet))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  VERB\tRESOURCE\tSCOPE\tCOUNT\t/s\tP50\tP99\tSLO")
	for i, a := range r.API {
		if i >= maxAPIRows {
			break
		}
		res := a.Resource
		if res == "" {
			res = "(non-resource)"
		}
		if a.Subresource != "" {
			res += "/" + a.Subresource
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%.0f\t%.1f\t%s\t%s\t%s\n", a.Verb, res, a.Scope, a.Count, a.PerSec, secs(a.P50), secs(a.P99), okMark(a.OK))
	}
	tw.Flush()
	if len(r.API) > maxAPIRows {
		fmt.Fprintf(w, "  … %d more rows in report.json\n", len(r.API)-maxAPIRows)
	}
	fmt.Fprintln(w, "\nstore operations (kube-apiserver → store)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  OPERATION\tCOUNT\t/s\tP50\tP99")
	for _, o := range r.StoreOps {
		fmt.Fprintf(tw, "  %s\t%.0f\t%.1f\t%s\t%s\n", o.Operation, o.Count, o.PerSec, secs(o.P50), secs(o.P99))
	}
	tw.Flush()
	fmt.Fprintln(w, "\ncomponents")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tPID\tCPU\tCPU s\tRSS\tPEAK RSS")
	// Hollow kubelets in one row (their sum; the largest peak) when there are more than a few:
	// report.json keeps each.
	var hollow []Usage
	for _, u := range r.Components {
		if strings.HasPrefix(u.Name, KubeletNodePrefix) {
			hollow = append(hollow, u)
		}
	}
	for _, u := range r.Components {
		if len(hollow) > 3 && strings.HasPrefix(u.Name, KubeletNodePrefix) {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.0f%%\t%.1f\t%.0f MiB\t%.0f MiB\n", u.Name, u.Pid, u.CPUPercent, u.CPUSeconds, u.RSSMiB, u.PeakRSSMiB)
	}
	if len(hollow) > 3 {
		var sum Usage
		for _, u := range hollow {
			sum.CPUPercent += u.CPUPercent
			sum.CPUSeconds += u.CPUSeconds
			sum.RSSMiB += u.RSSMiB
			sum.PeakRSSMiB = max(sum.PeakRSSMiB, u.PeakRSSMiB)
		}
		fmt.Fprintf(tw, "  %d hollow kubelets (sum)\t-\t%.0f%%\t%.1f\t%.0f MiB\t%.0f MiB (largest)\n", len(hollow), sum.CPUPercent, sum.CPUSeconds, sum.RSSMiB, sum.PeakRSSMiB)
	}
	tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// WriteFiles writes report.json and the charts (PNG) into dir.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "report.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return nil, err
	}
	files = append(files, p)
	pngs, err := writeCharts(dir, r.charts())
	files = append(files, pngs...)
	sort.Strings(files)
	return files, err
}

// writeCharts renders each chart to <dir>/<name>.png: the files written, in name order.
func writeCharts(dir string, charts map[string]*bench.Chart) ([]string, error) {
	var files []string
	for name, c := range charts {
		png, err := c.PNG()
		if err != nil {
			return files, err
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	sort.Strings(files)
	return files, nil
}

// pick keeps at most n evenly spaced indexes of a series of length l (always the last one).
func pick(l, n int) []int {
	if l <= n {
		out := make([]int, l)
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for k := 0; k < n; k++ {
		out = append(out, k*(l-1)/(n-1))
	}
	return out
}

func (r *Report) charts() map[string]*bench.Chart {
	out := map[string]*bench.Chart{}
	num := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	if p := r.Pods; p != nil && len(p.Timeline) > 0 {
		c := &bench.Chart{Title: fmt.Sprintf("%d pods on %d nodes (%s)", p.Count, r.Nodes, r.Store), XLabel: "seconds since the first create", YLabel: "pods", Format: num}
		var cr, sc, rn []float64
		for _, i := range pick(len(p.Timeline), 12) {
			t := p.Timeline[i]
			c.X = append(c.X, fmt.Sprintf("%.0f", t.Seconds))
			cr, sc, rn = append(cr, float64(t.Created)), append(sc, float64(t.Scheduled)), append(rn, float64(t.Running))
		}
		c.Series = []bench.Series{{Name: "created", Values: cr, Color: colorGray, Dashed: true}, {Name: "scheduled", Values: sc, Color: colorBlue},
			{Name: "running", Values: rn, Color: colorGreen, Dashed: true}}
		out["pods-over-time"] = c
		lc := &bench.Chart{Title: "pod latency (create → scheduled / Running), ms", XLabel: "percentile", YLabel: "ms", Format: num,
			X: []string{"p50", "p90", "p99", "max"}}
		lc.Series = []bench.Series{
			{Name: "scheduled", Color: colorBlue, Values: []float64{p.Schedule.P50Us / 1e3, p.Schedule.P90Us / 1e3, p.Schedule.P99Us / 1e3, p.Schedule.MaxUs / 1e3}},
			{Name: "running", Color: colorGreen, Values: []float64{p.Startup.P50Us / 1e3, p.Startup.P90Us / 1e3, p.Startup.P99Us / 1e3, p.Startup.MaxUs / 1e3}},
		}
		out["pod-latency"] = lc
	}
	if len(r.LeaseTimeline) > 0 {
		c := &bench.Chart{Title: fmt.Sprintf("lease writes/s (%d nodes, %s)", r.Nodes, r.Store), XLabel: "seconds", YLabel: "writes/s", Format: num}
		var v []float64
		for _, i := range pick(len(r.LeaseTimeline), 12) {
			c.X = append(c.X, fmt.Sprintf("%.0f", r.LeaseTimeline[i].Seconds))
			v = append(v, r.LeaseTimeline[i].PerSec)
		}
		c.Series = []bench.Series{{Name: "lease writes/s", Values: v, Color: colorBlue}}
		out["lease-writes"] = c
	}
	if len(r.API) > 0 {
		c := &bench.Chart{Title: "API call latency p99 (top calls by count), ms", XLabel: "verb resource", YLabel: "ms", Format: num}
		var p50, p99 []float64
		for i, a := range r.API {
			if i >= 8 {
				break
			}
			c.X = append(c.X, strings.ToLower(a.Verb)+" "+a.Resource)
			p50, p99 = append(p50, a.P50*1e3), append(p99, a.P99*1e3)
		}
		c.Series = []bench.Series{{Name: "p50", Values: p50, Color: colorGreen, Dashed: true}, {Name: "p99", Values: p99, Color: colorBlue}}
		out["api-latency"] = c
	}
	return out
}

var (
	colorBlue  = rgba(0x1f, 0x6f, 0xc5)
	colorGreen = rgba(0x55, 0x8b, 0x2f)
	colorGray  = rgba(0x88, 0x88, 0x88)
)
