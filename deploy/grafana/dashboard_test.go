package grafana

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (method) (rate(meganode_requests_total{job=~"$store_job"}[$__rate_interval]))`, []string{"meganode_requests_total"}},
		{`histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket{verb!~"WATCH|CONNECT"}[5m])))`,
			[]string{"apiserver_request_duration_seconds_bucket"}},
		{`rate(a_total[1m]) / on (instance) group_left (part) rate(b_total[1m:30s] offset 5m) > bool 1e3`, []string{"a_total", "b_total"}},
		{`sum(rate(x{l="}{[(",m='a\'b'}[5m])) without (le) or vector(0)`, []string{"x"}},
		{`max(meganode_scheduler_propose_seconds{quantile="0.99"}) * 1000 and on() .5 < ns:recorded:rule`, []string{"meganode_scheduler_propose_seconds", "ns:recorded:rule"}},
	} {
		got, err := MetricNames(c.expr)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("MetricNames(%s) = %v, %v; want %v", c.expr, got, err, c.want)
		}
	}
	for _, bad := range []string{`rate(x[5m]`, `x{a="b"`, `sum(x))`, `x{a="b}`, `x # comment`} {
		if got, err := MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%s) = %v, want an error", bad, got)
		}
	}
}

// The dashboard is importable (a datasource variable, every panel and target on it, unique
// ids, no two panels on the same grid cells) and plots what issue 13 asks for and the
// replication row of issue 36; test/e2e/scheduler checks that each name is exported.
func TestDashboard(t *testing.T) {
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct{ Name, Type, Query any } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int                      `json:"id"`
			Type       string                   `json:"type"`
			Title      string                   `json:"title"`
			Datasource json.RawMessage          `json:"datasource"`
			GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
			Targets    []struct {
				Datasource json.RawMessage `json:"datasource"`
				Expr       string          `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != "meganode" || d.Title == "" || len(d.Templating.List) == 0 || d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" {
		t.Fatalf("uid %q title %q variables %+v", d.UID, d.Title, d.Templating.List)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{} // grid cell (x, y) → the panel on it
	const ds = `{"type":"prometheus","uid":"${datasource}"}`
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d, %d)", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if compact(p.Datasource) != ds || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %s, %d targets", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if compact(tg.Datasource) != ds {
				t.Errorf("panel %q: target datasource %s", p.Title, tg.Datasource)
			}
		}
	}
	uses, names, err := AllMetricNames(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for what, name := range map[string]string{
		"store requests/s by RPC":         "meganode_requests_total",
		"store latency by RPC":            "meganode_request_duration_seconds_bucket",
		"WAL fsync latency":               "etcd_disk_wal_fsync_duration_seconds_bucket",
		"WAL batch size":                  "meganode_wal_batch_records_total",
		"watch streams":                   "etcd_debugging_mvcc_watch_stream_total",
		"watch lag":                       "meganode_watch_catchups_total",
		"memory":                          "process_resident_memory_bytes",
		"scheduler pods/s":                "meganode_scheduler_bound",
		"shard proposal latency":          "meganode_scheduler_proposal_latency_seconds",
		"stragglers":                      "meganode_scheduler_late_proposals",
		"conflicts":                       "meganode_scheduler_conflicts",
		"apiserver request latency (SLO)": "apiserver_request_duration_seconds_bucket",
		"pod startup latency (SLO)":       "kubelet_pod_start_sli_duration_seconds_bucket",
		"the store job variable's metric": "meganode_requests_total",
		"apiserver → store latency":       "etcd_request_duration_seconds_bucket",
		"has leader":                      "etcd_server_has_leader",
		"is leader per member":            "etcd_server_is_leader",
		"learners":                        "etcd_server_is_learner",
		"leader changes":                  "etcd_server_leader_changes_seen_total",
		"proposals committed":             "etcd_server_proposals_committed_total",
		"proposals applied":               "etcd_server_proposals_applied_total",
		"proposals pending":               "etcd_server_proposals_pending",
		"proposals failed":                "etcd_server_proposals_failed_total",
		"peer round-trip p99 by To":       "etcd_network_peer_round_trip_time_seconds_bucket",
	} {
		if len(uses[name]) == 0 {
			t.Errorf("%s: no query uses %s", what, name)
		}
	}
	t.Logf("%d metric names: %s", len(names), strings.Join(names, " "))
}

func compact(b json.RawMessage) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
