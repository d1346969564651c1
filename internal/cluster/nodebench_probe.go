package cluster

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"
)

// NodesWindow is what one window of `bench nodes` measured: the SLO report (API latency per
// verb, store operations, every component's CPU and memory from /proc) and the store-side
// figures of issue 39, from kube-apiserver's /metrics and the stores' own.
type NodesWindow struct {
	Seconds float64 `json:"seconds"`
	// StoreRequests: kube-apiserver's requests to the store (etcd_requests_total, by operation
	// and resource) in the window.
	StoreRequests     []StoreRequest `json:"store_requests"`
	StoreWritesPerSec float64        `json:"store_writes_per_sec"` // create + update + delete
	StoreReadsPerSec  float64        `json:"store_reads_per_sec"`  // get, list, listWithCount, …
	// APIWatchesByResource: watch requests open on kube-apiserver at the end of the window
	// (apiserver_longrunning_requests{verb="WATCH"}), by resource; APIWatches their sum.
	APIWatchesByResource []Count `json:"apiserver_watches_by_resource"`
	APIWatches           float64 `json:"apiserver_watches"`
	// StoreWatchers and StoreWatchStreams: the stores' own gauges at the end of the window
	// (etcd_debugging_mvcc_watcher_total, etcd_debugging_mvcc_watch_stream_total, summed over
	// the store processes): kube-apiserver's watches on the store. StoreWatchersByPrefix is
	// meganode-store's meganode_watchers_by_prefix (the prefix watched, /registry/<resource>/);
	// etcd has no such gauge. WatchEventsFromStore is what kube-apiserver's watch cache received
	// per resource, on either store.
	StoreWatchers         float64 `json:"store_watchers"`
	StoreWatchStreams     float64 `json:"store_watch_streams"`
	StoreWatchersByPrefix []Count `json:"store_watchers_by_prefix,omitempty"`
	WatchEventsFromStore  []Count `json:"watch_cache_events_received_by_resource"`
	// EventsWritten: creates and updates of Events (core and events.k8s.io) kube-apiserver
	// answered in the window (apiserver_request_total, POST/PUT/PATCH), and per second.
	EventsWritten float64 `json:"events_written"`
	EventsPerSec  float64 `json:"events_per_sec"`
	// APIRequestsPerSec: every non-watch request kube-apiserver answered, per second.
	APIRequestsPerSec float64 `json:"apiserver_requests_per_sec"`
	APIServer         Usage   `json:"apiserver_usage"`
	Store             Usage   `json:"store_usage"`               // summed over the store processes
	Kubelets          *Usage  `json:"hollow_kubelets,omitempty"` // summed over the hollow kubelets
	SLO               *Report `json:"slo_report"`
}

// StoreRequest is one operation on one resource.
type StoreRequest struct {
	Operation string  `json:"operation"`
	Resource  string  `json:"resource"`
	Count     float64 `json:"count"`
	PerSec    float64 `json:"per_sec"`
}

// Count is a figure by resource (a gauge's value, or a counter's growth with its rate).
type Count struct {
	Resource string  `json:"resource"`
	Value    float64 `json:"value"`
	PerSec   float64 `json:"per_sec,omitempty"`
}

// storeWriteOps are the etcd_requests_total operations that write.
var storeWriteOps = map[string]bool{"create": true, "update": true, "delete": true}

var probePrefixes = []string{"etcd_requests_total", "apiserver_request_total", "apiserver_longrunning_requests",
	"apiserver_watch_cache_events_received_total"}

// nodesProbe holds the first scrape of a window.
type nodesProbe struct {
	st     *State
	client *http.Client
	before *Snapshot
}

func startNodesProbe(ctx context.Context, st *State) (*nodesProbe, error) {
	c, err := AdminHTTPClient(st)
	if err != nil {
		return nil, err
	}
	s, err := Scrape(ctx, c, st.APIServerURL+"/metrics", probePrefixes...)
	if err != nil {
		return nil, err
	}
	return &nodesProbe{st: st, client: c, before: s}, nil
}

// stop takes the last scrape and builds the window around slo (the Recorder's report of the
// same window).
func (p *nodesProbe) stop(ctx context.Context, slo *Report) *NodesWindow {
	w := &NodesWindow{SLO: slo}
	after, err := Scrape(ctx, p.client, p.st.APIServerURL+"/metrics", probePrefixes...)
	if err != nil {
		if slo != nil {
			slo.Notes = append(slo.Notes, "bench nodes: last scrape of kube-apiserver failed: "+err.Error())
		}
		return w
	}
	win := after.At.Sub(p.before.At).Seconds()
	w.Seconds = win
	by := []string{"operation", "group", "resource"}
	for k, n := range CounterDelta(after.Counters("etcd_requests_total", by...), p.before.Counters("etcd_requests_total", by...)) {
		f := strings.Split(k, "|")
		r := StoreRequest{Operation: f[0], Resource: groupResource(f[1], f[2]), Count: n, PerSec: n / win}
		w.StoreRequests = append(w.StoreRequests, r)
		if storeWriteOps[r.Operation] {
			w.StoreWritesPerSec += r.PerSec
		} else {
			w.StoreReadsPerSec += r.PerSec
		}
	}
	sort.Slice(w.StoreRequests, func(i, j int) bool {
		a, b := w.StoreRequests[i], w.StoreRequests[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Operation+a.Resource < b.Operation+b.Resource
	})
	for k, v := range after.Counters("apiserver_longrunning_requests", "verb", "group", "resource") {
		f := strings.Split(k, "|")
		if f[0] != "WATCH" || v == 0 {
			continue
		}
		w.APIWatchesByResource = append(w.APIWatchesByResource, Count{Resource: groupResource(f[1], f[2]), Value: v})
		w.APIWatches += v
	}
	sortCounts(w.APIWatchesByResource)
	for k, n := range CounterDelta(after.Counters("apiserver_watch_cache_events_received_total", "group", "resource"),
		p.before.Counters("apiserver_watch_cache_events_received_total", "group", "resource")) {
		f := strings.Split(k, "|")
		w.WatchEventsFromStore = append(w.WatchEventsFromStore, Count{Resource: groupResource(f[0], f[1]), Value: n, PerSec: n / win})
	}
	sortCounts(w.WatchEventsFromStore)
	for k, n := range CounterDelta(after.Counters("apiserver_request_total", "verb", "resource"), p.before.Counters("apiserver_request_total", "verb", "resource")) {
		verb, res, _ := strings.Cut(k, "|")
		if res == "events" && (verb == "POST" || verb == "PUT" || verb == "PATCH") {
			w.EventsWritten += n
		}
		if verb != "WATCH" && verb != "WATCHLIST" && verb != "CONNECT" {
			w.APIRequestsPerSec += n / win
		}
	}
	w.EventsPerSec = w.EventsWritten / win
	w.StoreWatchers, w.StoreWatchStreams, w.StoreWatchersByPrefix = p.storeWatches(ctx)
	if slo != nil {
		stores := map[string]bool{}
		for _, n := range slo.StoreNames {
			stores[n] = true
		}
		for _, c := range p.st.Components {
			if c.Kind == BinStore || c.Kind == StoreEtcd {
				stores[c.Name] = true
			}
		}
		var kl Usage
		for _, u := range slo.Components {
			switch {
			case u.Name == "kube-apiserver":
				w.APIServer = u
			case stores[u.Name]:
				w.Store = addUsage(w.Store, u, "store")
			case strings.HasPrefix(u.Name, KubeletNodePrefix):
				kl = addUsage(kl, u, "hollow kubelets")
				w.Kubelets = &kl
			}
		}
	}
	return w
}

// addUsage sums two processes' usage (the peak: the sum of each one's).
func addUsage(a, b Usage, name string) Usage {
	return Usage{Name: name, CPUSeconds: a.CPUSeconds + b.CPUSeconds, CPUPercent: a.CPUPercent + b.CPUPercent,
		RSSMiB: a.RSSMiB + b.RSSMiB, PeakRSSMiB: a.PeakRSSMiB + b.PeakRSSMiB}
}

// storeWatches sums the stores' watcher and watch-stream gauges (meganode-store serves the
// same two names as etcd) and meganode-store's watchers by prefix.
func (p *nodesProbe) storeWatches(ctx context.Context) (watchers, streams float64, byPrefix []Count) {
	prefixes := map[string]float64{}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, comp := range p.st.Components {
		if (comp.Kind != BinStore && comp.Kind != StoreEtcd) || comp.MetricsURL == "" || strings.HasPrefix(comp.MetricsURL, "https") {
			continue
		}
		s, err := Scrape(ctx, c, comp.MetricsURL+"/metrics", "etcd_debugging_mvcc_watch", "meganode_watchers_by_prefix")
		if err != nil {
			continue
		}
		watchers += s.Sum("etcd_debugging_mvcc_watcher_total", nil)
		streams += s.Sum("etcd_debugging_mvcc_watch_stream_total", nil)
		for prefix, n := range s.Counters("meganode_watchers_by_prefix", "prefix") {
			prefixes[prefix] += n
		}
	}
	for prefix, n := range prefixes {
		byPrefix = append(byPrefix, Count{Resource: prefix, Value: n})
	}
	sortCounts(byPrefix)
	return watchers, streams, byPrefix
}

// groupResource is "resource" for the core group, "resource.group" otherwise.
func groupResource(group, resource string) string {
	if group == "" || group == "core" {
		return resource
	}
	return resource + "." + group
}

func sortCounts(cs []Count) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Value != cs[j].Value {
			return cs[i].Value > cs[j].Value
		}
		return cs[i].Resource < cs[j].Resource
	})
}
