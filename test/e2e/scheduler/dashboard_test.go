package scheduler

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"

	"github.com/meganode/meganode/deploy/grafana"
	"github.com/meganode/meganode/internal/cluster"
)

// exportedMetrics scrapes the `up` cluster's meganode-store (--listen-metrics-urls), the
// meganode scheduler and kube-apiserver, and returns each metric name with where it was seen.
// The kubelet's pod startup SLI is taken from the kubelet's own definition in
// k8s.io/kubernetes v1.36.3: KWOK nodes run no kubelet, so no process here exports it.
func exportedMetrics(ctx context.Context, t *testing.T, st *cluster.State) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(what string, s *cluster.Snapshot) {
		for _, smp := range s.Samples {
			if _, ok := out[smp.Name]; !ok {
				out[smp.Name] = what
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range st.Components {
		var url string
		switch c.Kind {
		case cluster.BinStore:
			url = c.MetricsURL + "/metrics"
		case cluster.KindMeganodeScheduler:
			url = c.URL + "/metrics"
		default:
			continue
		}
		s, err := cluster.Scrape(ctx, http.DefaultClient, url)
		if err != nil {
			t.Fatalf("scrape %s: %v", c.Name, err)
		}
		add(c.Kind, s)
		seen[c.Kind] = true
	}
	admin, err := cluster.AdminHTTPClient(st)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cluster.Scrape(ctx, admin, st.APIServerURL+"/metrics")
	if err != nil {
		t.Fatalf("scrape kube-apiserver: %v", err)
	}
	add(cluster.BinAPIServer, s)
	if !seen[cluster.BinStore] || !seen[cluster.KindMeganodeScheduler] {
		t.Fatalf("scraped %v: want %s and %s", seen, cluster.BinStore, cluster.KindMeganodeScheduler)
	}
	h := kubeletmetrics.PodStartSLIDuration.HistogramOpts
	sli := h.Subsystem + "_" + h.Name
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		out[sli+suffix] = "kubelet v1.36.3 (its metric definition; KWOK nodes have no kubelet)"
		// A single member has no peers to time: a group's leader exports the series,
		// which test/e2e's TestReplicatedGroup (groupMetricsAsEtcd) checks on real members.
		out["etcd_network_peer_round_trip_time_seconds"+suffix] = "meganode-store in a replicated group (test/e2e TestReplicatedGroup)"
	}
	return out
}

// missingMetrics lists the dashboard's metric names that are not in exported, each with the
// queries that use it.
func missingMetrics(t *testing.T, dashboard []byte, exported map[string]string) []string {
	t.Helper()
	uses, names, err := grafana.AllMetricNames(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range names {
		if _, ok := exported[n]; !ok {
			missing = append(missing, n+" (used by "+strings.Join(uses[n], "; ")+")")
		}
	}
	return missing
}

// checkDashboard: every metric name deploy/grafana/meganode.json queries is exported by the
// running cluster. A copy with one planted name must fail the same check (the check can fail).
func checkDashboard(ctx context.Context, t *testing.T, st *cluster.State) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	exported := exportedMetrics(ctx, t, st)
	if m := missingMetrics(t, grafana.Dashboard, exported); len(m) > 0 {
		t.Errorf("deploy/grafana/meganode.json queries %d metric(s) the cluster does not export:\n  %s", len(m), strings.Join(m, "\n  "))
	}
	_, names, _ := grafana.AllMetricNames(grafana.Dashboard)
	from := map[string][]string{}
	for _, n := range names {
		if what, ok := exported[n]; ok {
			from[what] = append(from[what], n)
		}
	}
	for what, ns := range from {
		t.Logf("%d from %s: %s", len(ns), what, strings.Join(ns, " "))
	}
	planted := strings.Replace(string(grafana.Dashboard), "meganode_scheduler_conflicts", "meganode_scheduler_conflictz", 1)
	if m := missingMetrics(t, []byte(planted), exported); len(m) != 1 || !strings.HasPrefix(m[0], "meganode_scheduler_conflictz ") {
		t.Errorf("a planted name should be the one missing, got %v", m)
	}
	if !slices.Contains(names, "meganode_scheduler_conflicts") {
		t.Error("the dashboard no longer plots meganode_scheduler_conflicts (the planted-name check relies on it)")
	}
}
