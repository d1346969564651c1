package cluster

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// summaryRow is one figure across the runs (nil: not measured in that run).
type summaryRow struct {
	section string
	name    string
	values  []*float64
	format  string
	ratio   bool // worth a kubelet/KWOK ratio
}

func (rep *NodesReport) rows() []summaryRow {
	var rows []summaryRow
	add := func(section, name, format string, ratio bool, get func(r *NodesRun) (float64, bool)) {
		row := summaryRow{section: section, name: name, format: format, ratio: ratio}
		for _, r := range rep.Runs {
			if v, ok := get(r); ok && !math.IsNaN(v) {
				row.values = append(row.values, &v)
			} else {
				row.values = append(row.values, nil)
			}
		}
		rows = append(rows, row)
	}
	pod := func(f func(w *NodesWindow) float64) func(r *NodesRun) (float64, bool) {
		return func(r *NodesRun) (float64, bool) {
			if r.PodPhase == nil {
				return 0, false
			}
			return f(r.PodPhase), true
		}
	}
	steady := func(f func(w *NodesWindow) float64) func(r *NodesRun) (float64, bool) {
		return func(r *NodesRun) (float64, bool) {
			if r.Steady == nil {
				return 0, false
			}
			return f(r.Steady), true
		}
	}
	per := func(f func(p *PerNode) float64) func(r *NodesRun) (float64, bool) {
		return func(r *NodesRun) (float64, bool) {
			if r.PerNode == nil {
				return 0, false
			}
			return f(r.PerNode), true
		}
	}
	podRun := func(f func(p *PodRun) float64) func(r *NodesRun) (float64, bool) {
		return func(r *NodesRun) (float64, bool) {
			if r.PodPhase == nil || r.PodPhase.SLO == nil || r.PodPhase.SLO.Pods == nil {
				return 0, false
			}
			return f(r.PodPhase.SLO.Pods), true
		}
	}
	add("cluster", "up until every node Ready (s)", "%.1f", true, func(r *NodesRun) (float64, bool) { return r.UpSeconds, r.UpSeconds > 0 })

	const pp = "pod phase (first create → every pod Running)"
	add(pp, "length (s)", "%.1f", true, pod(func(w *NodesWindow) float64 { return w.Seconds }))
	add(pp, "pods Running", "%.0f", false, podRun(func(p *PodRun) float64 { return float64(p.Running) }))
	add(pp, "pod startup p50 (ms)", "%.0f", true, podRun(func(p *PodRun) float64 { return p.Startup.P50Us / 1e3 }))
	add(pp, "pod startup p99 (ms)", "%.0f", true, podRun(func(p *PodRun) float64 { return p.Startup.P99Us / 1e3 }))
	add(pp, "Events written", "%.0f", true, pod(func(w *NodesWindow) float64 { return w.EventsWritten }))
	add(pp, "Events/s", "%.1f", true, pod(func(w *NodesWindow) float64 { return w.EventsPerSec }))
	add(pp, "store writes/s", "%.1f", true, pod(func(w *NodesWindow) float64 { return w.StoreWritesPerSec }))
	add(pp, "store reads/s", "%.1f", true, pod(func(w *NodesWindow) float64 { return w.StoreReadsPerSec }))
	add(pp, "kube-apiserver requests/s", "%.1f", true, pod(func(w *NodesWindow) float64 { return w.APIRequestsPerSec }))
	add(pp, "kube-apiserver CPU (cores)", "%.3f", true, pod(func(w *NodesWindow) float64 { return w.APIServer.CPUPercent / 100 }))
	add(pp, "API p99, worst verb (ms)", "%.0f", true, pod(func(w *NodesWindow) float64 { return worstP99(w) * 1e3 }))

	const st = "steady window (every pod Running)"
	add(st, "length (s)", "%.1f", false, steady(func(w *NodesWindow) float64 { return w.Seconds }))
	add(st, "store writes/s", "%.1f", true, steady(func(w *NodesWindow) float64 { return w.StoreWritesPerSec }))
	add(st, "store reads/s", "%.1f", true, steady(func(w *NodesWindow) float64 { return w.StoreReadsPerSec }))
	add(st, "kube-apiserver requests/s", "%.1f", true, steady(func(w *NodesWindow) float64 { return w.APIRequestsPerSec }))
	add(st, "watches on kube-apiserver", "%.0f", true, steady(func(w *NodesWindow) float64 { return w.APIWatches }))
	add(st, "store watchers (store /metrics)", "%.0f", true, steady(func(w *NodesWindow) float64 { return w.StoreWatchers }))
	add(st, "store watch streams (store /metrics)", "%.0f", true, steady(func(w *NodesWindow) float64 { return w.StoreWatchStreams }))
	add(st, "Events/s", "%.2f", true, steady(func(w *NodesWindow) float64 { return w.EventsPerSec }))
	add(st, "kube-apiserver CPU (cores)", "%.3f", true, steady(func(w *NodesWindow) float64 { return w.APIServer.CPUPercent / 100 }))
	add(st, "kube-apiserver RSS (MiB)", "%.0f", true, steady(func(w *NodesWindow) float64 { return w.APIServer.RSSMiB }))
	add(st, "store CPU (cores)", "%.3f", true, steady(func(w *NodesWindow) float64 { return w.Store.CPUPercent / 100 }))
	add(st, "store RSS (MiB)", "%.0f", true, steady(func(w *NodesWindow) float64 { return w.Store.RSSMiB }))
	add(st, "hollow kubelets CPU (cores, all)", "%.3f", false, func(r *NodesRun) (float64, bool) {
		if r.Steady == nil || r.Steady.Kubelets == nil {
			return 0, false
		}
		return r.Steady.Kubelets.CPUPercent / 100, true
	})
	add(st, "API p99, worst verb (ms)", "%.0f", true, steady(func(w *NodesWindow) float64 { return worstP99(w) * 1e3 }))

	const sk = "store contents (end of the steady window)"
	add(sk, "keys", "%.0f", true, func(r *NodesRun) (float64, bool) { k, _ := keyTotals(r.Keys); return k, len(r.Keys) > 0 })
	add(sk, "bytes (MiB)", "%.2f", true, func(r *NodesRun) (float64, bool) { _, b := keyTotals(r.Keys); return b / (1 << 20), len(r.Keys) > 0 })
	add(sk, "Event keys", "%.0f", true, func(r *NodesRun) (float64, bool) { return keysOf(r.Keys, "events"), len(r.Keys) > 0 })

	const pn = "per node (÷ nodes; includes the control plane's own share)"
	add(pn, "store writes/s (steady)", "%.3f", true, per(func(p *PerNode) float64 { return p.StoreWritesPerSec }))
	add(pn, "kube-apiserver requests/s (steady)", "%.3f", true, per(func(p *PerNode) float64 { return p.APIRequestsPerSec }))
	add(pn, "watches on kube-apiserver", "%.2f", true, per(func(p *PerNode) float64 { return p.APIWatches }))
	add(pn, "Events/s (steady)", "%.4f", true, per(func(p *PerNode) float64 { return p.EventsPerSec }))
	add(pn, "Events/s (pod phase)", "%.3f", true, per(func(p *PerNode) float64 { return p.PodPhaseEventsPerNodeSec }))
	add(pn, "store writes/s (pod phase)", "%.3f", true, per(func(p *PerNode) float64 { return p.PodPhaseStoreWritesPerSec }))
	add(pn, "kube-apiserver CPU (millicores, steady)", "%.2f", true, per(func(p *PerNode) float64 { return p.APIServerCPUMillicores }))
	add(pn, "kube-apiserver RSS (KiB)", "%.0f", true, per(func(p *PerNode) float64 { return p.APIServerRSSKiB }))
	add(pn, "store CPU (millicores, steady)", "%.2f", true, per(func(p *PerNode) float64 { return p.StoreCPUMillicores }))
	add(pn, "Events per pod start", "%.2f", true, per(func(p *PerNode) float64 { return p.EventsPerPodStart }))
	add(pn, "store writes per pod start", "%.2f", true, per(func(p *PerNode) float64 { return p.StoreWritesPerPodStart }))
	add(pn, "pod writes per pod start", "%.2f", true, per(func(p *PerNode) float64 { return p.PodWritesPerPodStart }))

	add("teardown", "processes left after down", "%.0f", false, func(r *NodesRun) (float64, bool) {
		return float64(len(r.ProcessesLeft)), r.ProcessesLeft != nil
	})
	return rows
}

func worstP99(w *NodesWindow) float64 {
	worst := math.NaN()
	if w.SLO == nil {
		return worst
	}
	for _, a := range w.SLO.APIByVerb {
		if math.IsNaN(worst) || a.P99 > worst {
			worst = a.P99
		}
	}
	return worst
}

func keyTotals(ks []KeyCount) (keys, bytes float64) {
	for _, k := range ks {
		keys += float64(k.Keys)
		bytes += float64(k.Bytes)
	}
	return keys, bytes
}

func keysOf(ks []KeyCount, res string) float64 {
	for _, k := range ks {
		if k.Resource == res {
			return float64(k.Keys)
		}
	}
	return 0
}

// ratioColumns are the (kubelet, KWOK) run index pairs on one store, one ratio column each.
func (rep *NodesReport) ratioColumns() (names []string, pairs [][2]int) {
	for _, store := range []string{StoreMeganode, StoreEtcd} {
		ki, wi := -1, -1
		for i, r := range rep.Runs {
			if r.Store == store && r.Kind == AgentKubelet && ki < 0 {
				ki = i
			}
			if r.Store == store && r.Kind == AgentKWOK && wi < 0 {
				wi = i
			}
		}
		if ki >= 0 && wi >= 0 {
			names = append(names, fmt.Sprintf("kubelet / KWOK (%s)", store))
			pairs = append(pairs, [2]int{ki, wi})
		}
	}
	return names, pairs
}

// WriteSummary writes the side-by-side tables as markdown.
func (rep *NodesReport) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "# bench nodes: %d nodes × %d pods per node, kubelet vs KWOK\n\n", rep.Nodes, rep.PodsPerNode)
	fmt.Fprintf(w, "`%s`  \n%s, %d cores; steady window %.0f s; pods created at %s\n\n", strings.Join(rep.Command, " "),
		rep.Start.Format("2006-01-02 15:04 UTC"), rep.Cores, rep.WindowSeconds, qpsText(rep.CreateQPS))
	for _, r := range rep.Runs {
		if r.IncludedFrom != "" {
			fmt.Fprintf(w, "- %s: from %s\n", r.Label(), r.IncludedFrom)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "- %s: **failed**: %s\n", r.Label(), r.Error)
		}
	}
	rnames, pairs := rep.ratioColumns()
	head := "| figure |"
	sep := "| --- |"
	for _, r := range rep.Runs {
		head += " " + r.Label() + " |"
		sep += " --- |"
	}
	for _, n := range rnames {
		head += " " + n + " |"
		sep += " --- |"
	}
	section := ""
	for _, row := range rep.rows() {
		if row.section != section {
			section = row.section
			fmt.Fprintf(w, "\n### %s\n\n%s\n%s\n", section, head, sep)
		}
		line := "| " + row.name + " |"
		for _, v := range row.values {
			line += " " + fmtOpt(row.format, v) + " |"
		}
		for _, p := range pairs {
			k, kw := row.values[p[0]], row.values[p[1]]
			if row.ratio && k != nil && kw != nil && *kw != 0 {
				line += fmt.Sprintf(" %.2f× |", *k / *kw)
			} else {
				line += " |"
			}
		}
		fmt.Fprintln(w, line)
	}
	rep.writeByResource(w)
}

func qpsText(q float64) string {
	if q <= 0 {
		return "as fast as the apiserver takes them"
	}
	return fmt.Sprintf("%g/s", q)
}

func fmtOpt(format string, v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf(format, *v)
}

// writeByResource writes the tables by resource (and operation, verb).
func (rep *NodesReport) writeByResource(w io.Writer) {
	table := func(title string, keys []string, cell func(r *NodesRun, key string) string) {
		if len(keys) == 0 {
			return
		}
		fmt.Fprintf(w, "\n### %s\n\n| |", title)
		for _, r := range rep.Runs {
			fmt.Fprintf(w, " %s |", r.Label())
		}
		fmt.Fprint(w, "\n| --- |")
		for range rep.Runs {
			fmt.Fprint(w, " --- |")
		}
		fmt.Fprintln(w)
		for _, k := range keys {
			fmt.Fprintf(w, "| %s |", k)
			for _, r := range rep.Runs {
				fmt.Fprintf(w, " %s |", cell(r, k))
			}
			fmt.Fprintln(w)
		}
	}
	reqKeys := func(win func(r *NodesRun) *NodesWindow) ([]string, map[string]map[string]float64) {
		vals := map[string]map[string]float64{}
		for _, r := range rep.Runs {
			if w := win(r); w != nil {
				for _, q := range w.StoreRequests {
					k := q.Operation + " " + q.Resource
					if vals[k] == nil {
						vals[k] = map[string]float64{}
					}
					vals[k][r.Label()] += q.PerSec
				}
			}
		}
		return keysByMax(vals), vals
	}
	cellOf := func(format string, vals map[string]map[string]float64) func(r *NodesRun, k string) string {
		return func(r *NodesRun, k string) string {
			v, ok := vals[k][r.Label()]
			if !ok {
				return "—"
			}
			return fmt.Sprintf(format, v)
		}
	}
	rateCell := func(vals map[string]map[string]float64) func(r *NodesRun, k string) string {
		return cellOf("%.2f", vals)
	}
	keys, vals := reqKeys(func(r *NodesRun) *NodesWindow { return r.Steady })
	table("store requests/s by operation and resource, steady window (etcd_requests_total)", keys, rateCell(vals))
	keys, vals = reqKeys(func(r *NodesRun) *NodesWindow { return r.PodPhase })
	table("store requests/s by operation and resource, pod phase (etcd_requests_total)", keys, rateCell(vals))

	counts := func(get func(w *NodesWindow) []Count, rate bool) ([]string, map[string]map[string]float64) {
		vals := map[string]map[string]float64{}
		for _, r := range rep.Runs {
			if r.Steady == nil {
				continue
			}
			for _, c := range get(r.Steady) {
				if vals[c.Resource] == nil {
					vals[c.Resource] = map[string]float64{}
				}
				v := c.Value
				if rate {
					v = c.PerSec
				}
				vals[c.Resource][r.Label()] = v
			}
		}
		return keysByMax(vals), vals
	}
	keys, vals = counts(func(w *NodesWindow) []Count { return w.APIWatchesByResource }, false)
	table("watches open on kube-apiserver by resource, end of the steady window (apiserver_longrunning_requests{verb=\"WATCH\"})", keys, cellOf("%.0f", vals))
	keys, vals = counts(func(w *NodesWindow) []Count { return w.StoreWatchersByPrefix }, false)
	table("watchers on the store by prefix watched, end of the steady window (meganode-store's meganode_watchers_by_prefix; etcd has no such gauge)", keys, cellOf("%.0f", vals))
	keys, vals = counts(func(w *NodesWindow) []Count { return w.WatchEventsFromStore }, true)
	table("watch events/s kube-apiserver's cache received from the store, steady window (apiserver_watch_cache_events_received_total)", keys, rateCell(vals))

	kv := map[string]map[string]float64{}
	for _, r := range rep.Runs {
		for _, k := range r.Keys {
			if kv[k.Resource] == nil {
				kv[k.Resource] = map[string]float64{}
			}
			kv[k.Resource][r.Label()] = float64(k.Keys)
			kv[k.Resource][r.Label()+" bytes"] = float64(k.Bytes)
		}
	}
	table("store keys (bytes) by resource, end of the steady window", keysByMax(kv), func(r *NodesRun, k string) string {
		n, ok := kv[k][r.Label()]
		if !ok {
			return "—"
		}
		return fmt.Sprintf("%.0f (%s)", n, humanBytes(kv[k][r.Label()+" bytes"]))
	})

	verbs := map[string]map[string]float64{}
	for _, r := range rep.Runs {
		for phase, win := range map[string]*NodesWindow{"pod phase": r.PodPhase, "steady": r.Steady} {
			if win == nil || win.SLO == nil {
				continue
			}
			for _, a := range win.SLO.APIByVerb {
				k := a.Verb + ", " + phase
				if verbs[k] == nil {
					verbs[k] = map[string]float64{}
				}
				verbs[k][r.Label()] = a.P99
			}
		}
	}
	vk := make([]string, 0, len(verbs))
	for k := range verbs {
		vk = append(vk, k)
	}
	sort.Strings(vk)
	table("API p99 per verb (apiserver_request_duration_seconds)", vk, func(r *NodesRun, k string) string {
		v, ok := verbs[k][r.Label()]
		if !ok {
			return "—"
		}
		return secs(v)
	})
}

// keysByMax orders keys by their largest value over the runs, largest first.
func keysByMax(vals map[string]map[string]float64) []string {
	top := map[string]float64{}
	keys := make([]string, 0, len(vals))
	for k, m := range vals {
		keys = append(keys, k)
		for _, v := range m {
			top[k] = math.Max(top[k], v)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if top[keys[i]] != top[keys[j]] {
			return top[keys[i]] > top[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func humanBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}
