package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// apiserverMetrics is a kube-apiserver /metrics excerpt: request-duration buckets of two
// verbs (over two resources for POST) and request counts by code.
func apiserverMetrics(postFast, postSlow, putFast, conflicts, internal float64) string {
	var b strings.Builder
	bounds := []string{"0.005", "0.025", "0.1", "0.5", "1", "1.25", "2", "5", "+Inf"}
	hist := func(verb, res string, fast, slow float64) {
		// fast ones ≤ 5 ms, slow ones in (1.25, 2] s.
		for _, le := range bounds {
			n := fast
			switch le {
			case "2", "5", "+Inf":
				n += slow
			}
			fmt.Fprintf(&b, "apiserver_request_duration_seconds_bucket{component=\"apiserver\",dry_run=\"\",group=\"\",resource=%q,scope=\"resource\",subresource=\"\",verb=%q,version=\"v1\",le=%q} %g\n", res, verb, le, n)
		}
		fmt.Fprintf(&b, "apiserver_request_duration_seconds_sum{component=\"apiserver\",dry_run=\"\",group=\"\",resource=%q,scope=\"resource\",subresource=\"\",verb=%q,version=\"v1\"} %g\n", res, verb, fast*0.003+slow*1.5)
		fmt.Fprintf(&b, "apiserver_request_duration_seconds_count{component=\"apiserver\",dry_run=\"\",group=\"\",resource=%q,scope=\"resource\",subresource=\"\",verb=%q,version=\"v1\"} %g\n", res, verb, fast+slow)
	}
	b.WriteString("# HELP apiserver_request_duration_seconds …\n# TYPE apiserver_request_duration_seconds histogram\n")
	hist("POST", "pods", postFast, postSlow)
	hist("POST", "events", postFast, 0)
	hist("PUT", "leases", putFast, 0)
	fmt.Fprintf(&b, "apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} %g\n", postFast+postSlow)
	fmt.Fprintf(&b, "apiserver_request_total{code=\"409\",component=\"apiserver\",dry_run=\"\",group=\"coordination.k8s.io\",resource=\"leases\",scope=\"resource\",subresource=\"\",verb=\"PUT\",version=\"v1\"} %g\n", conflicts)
	fmt.Fprintf(&b, "apiserver_request_total{code=\"500\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} %g\n", internal)
	return b.String()
}

// A window's latency is the difference of two scrapes of cumulative buckets: what came
// before the window does not count, and the p99 falls in the bucket of the slow requests
// only when they are more than 1 % of the window's.
func TestServerWindowFromHistogramDifference(t *testing.T) {
	parse := func(s string) *cluster.Snapshot {
		snap, err := cluster.ParseMetrics(strings.NewReader(s), "apiserver_request")
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	// Before the window: 1000 fast POSTs per resource and 50 slow pod creates (the SLO is
	// already missed over the process's life); in the window 1000 more fast ones and 30 slow.
	start := parse(apiserverMetrics(1000, 50, 500, 7, 2))
	end := parse(apiserverMetrics(2000, 80, 1000, 9, 5))

	by := []string{"verb", "resource"}
	d := cluster.Delta(end.Histograms("apiserver_request_duration_seconds", by...), start.Histograms("apiserver_request_duration_seconds", by...))
	pods := d["POST|pods"]
	if pods == nil || pods.Count() != 1030 {
		t.Fatalf("POST pods in the window: %+v", pods)
	}
	// 30 of 1030 (2.9 %) are slow: the p99 is in (1.25, 2] s, linearly interpolated, the p50 ≤ 5 ms.
	if q := pods.Quantile(0.99); q <= 1.25 || q > 2 {
		t.Errorf("POST pods p99 = %v, want in (1.25, 2]", q)
	}
	if q := pods.Quantile(0.5); q > 0.005 {
		t.Errorf("POST pods p50 = %v, want ≤ 5 ms", q)
	}
	if q := d["POST|events"].Quantile(0.99); q > 0.005 {
		t.Errorf("POST events p99 = %v, want ≤ 5 ms", q)
	}
	// Per verb (every resource): 2030 POSTs, 30 slow = 1.5 % → p99 still in the slow bucket;
	// the whole process's life (no difference) would have 80 of 4080 slow.
	verb := cluster.Delta(end.Histograms("apiserver_request_duration_seconds", "verb"), start.Histograms("apiserver_request_duration_seconds", "verb"))
	if n := verb["POST"].Count(); n != 2030 {
		t.Errorf("POST in the window: %v, want 2030", n)
	}
	if q := verb["POST"].Quantile(0.99); q <= 1.25 || q > 2 {
		t.Errorf("POST p99 = %v, want in (1.25, 2]", q)
	}
	if q := verb["PUT"].Quantile(0.99); q > 0.005 || verb["PUT"].Count() != 500 {
		t.Errorf("PUT: %v requests, p99 %v", verb["PUT"].Count(), q)
	}
	// A window with no slow request: the p99 is back under 5 ms though the counters still hold
	// the earlier slow ones.
	later := parse(apiserverMetrics(3000, 80, 1500, 9, 5))
	quiet := cluster.Delta(later.Histograms("apiserver_request_duration_seconds", "verb"), end.Histograms("apiserver_request_duration_seconds", "verb"))
	if q := quiet["POST"].Quantile(0.99); q > 0.005 || math.IsNaN(q) {
		t.Errorf("quiet window POST p99 = %v, want ≤ 5 ms", q)
	}

	// Error codes in the window: the counters' differences, per verb, resource and code.
	codes := cluster.CounterDelta(end.Counters("apiserver_request_total", "verb", "resource", "code"), start.Counters("apiserver_request_total", "verb", "resource", "code"))
	if codes["POST|pods|500"] != 3 || codes["PUT|leases|409"] != 2 || codes["POST|pods|201"] != 1030 {
		t.Errorf("codes in the window: %v", codes)
	}
	if _, ok := cluster.CounterDelta(later.Counters("apiserver_request_total", "verb", "resource", "code"), end.Counters("apiserver_request_total", "verb", "resource", "code"))["POST|pods|500"]; ok {
		t.Error("a code that did not grow is not in the window")
	}
}

func TestRequestVerb(t *testing.T) {
	for _, c := range []struct{ method, path, verb, res string }{
		{"POST", "/api/v1/namespaces/ns/pods", "POST", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods/p-1", "GET", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods", "LIST", "pods"},
		{"GET", "/api/v1/nodes", "LIST", "nodes"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "PUT", "leases"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p-1/status", "PATCH", "pods"},
		{"GET", "/api/v1/namespaces/ns", "GET", "namespaces"},
	} {
		if v, r := requestVerb(c.method, c.path); v != c.verb || r != c.res {
			t.Errorf("%s %s = %s %s, want %s %s", c.method, c.path, v, r, c.verb, c.res)
		}
	}
}

func TestClassifyErr(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct {
		err     error
		timeout bool
		class   string
	}{
		{apierrors.NewServerTimeout(gr, "create", 2), true, "500 ServerTimeout: "},
		{apierrors.NewTimeoutError("request did not complete", 1), true, "504 Timeout: "},
		{apierrors.NewInternalError(errors.New("etcdserver: leader changed")), false, "500 InternalError: Internal error occurred: etcdserver: leader changed"},
		{apierrors.NewAlreadyExists(gr, "apif-1a2b-000042"), false, `409 AlreadyExists: pods "<pod>" already exists`},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), true, "client: post: context deadline exceeded"},
	} {
		class, to := classifyErr(c.err)
		if to != c.timeout || !strings.HasPrefix(class, c.class) {
			t.Errorf("%v: class %q timeout %v, want prefix %q timeout %v", c.err, class, to, c.class, c.timeout)
		}
	}
}

// The attempt recorder sees every HTTP answer, the error bodies' reasons and Retry-After,
// and leaves the body for client-go to read.
func TestAttemptRecorder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/namespaces/ns/pods":
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"The POST operation against pods could not be completed at this time, please try again.","reason":"ServerTimeout","code":500}`)
		default:
			io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	log := &callLog{}
	c := &http.Client{Transport: &attemptRecorder{next: http.DefaultTransport, log: log}}
	resp, err := c.Post(srv.URL+"/api/v1/namespaces/ns/pods", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ServerTimeout") {
		t.Errorf("the body was not passed on: %q", body)
	}
	if _, err := c.Get(srv.URL + "/api/v1/namespaces/ns/pods?watch=true"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(srv.URL + "/api/v1/namespaces/ns/pods/p"); err != nil {
		t.Fatal(err)
	}
	got := log.all()
	if len(got) != 2 {
		t.Fatalf("%d attempts recorded (the watch is not one), want 2: %+v", len(got), got)
	}
	if a := got[0]; a.Verb != "POST" || a.Code != 500 || !a.Timeout || !a.RetryAfter || !strings.HasPrefix(a.Err, "500 ServerTimeout: ") {
		t.Errorf("POST attempt: %+v", a)
	}
	if a := got[1]; a.Verb != "GET" || a.Code != 200 || a.Err != "" {
		t.Errorf("GET attempt: %+v", a)
	}
}

func TestJudgeAPIFailover(t *testing.T) {
	ok := func() *apiFailoverResult {
		return &apiFailoverResult{
			Windows: []apiFailoverWindow{{Window: bench.Window{Name: "before-kill"}, Server: &cluster.Report{}},
				{Window: bench.Window{Name: "after-kill"},
					Server: &cluster.Report{APIByVerb: []cluster.APILatency{{Verb: "POST", P99: 0.4}, {Verb: "LIST", P99: 3}, {Verb: "PUT", P99: 0.9}},
						APIErrors: []cluster.APIErrorCount{{Verb: "PUT", Resource: "leases", Code: "409", Count: 3}}},
					Calls: []bench.CallStats{{Verb: "POST", Resource: "pods", P99Ms: 700}}}},
			CallErrors: []bench.ErrorCount{{Error: "500 ServerTimeout: …", Count: 2, Timeout: true}},
		}
	}
	r := ok()
	if tg := judgeAPIFailover(r); !tg.Met || tg.Server5xx != 0 {
		t.Fatalf("want met (LIST's 3 s is under its own SLO, a 409 is no 5xx): %+v", tg)
	}
	r = ok()
	r.Windows[1].Server.APIByVerb[2].P99 = 1.2
	if tg := judgeAPIFailover(r); tg.Met || tg.ServerP99OK || len(tg.Over) != 1 {
		t.Errorf("PUT p99 1.2 s: %+v", tg)
	}
	// A few slow creates of one resource hide in the verb's p99; the pair's shows them.
	r = ok()
	r.Windows[1].Server.API = []cluster.APILatency{{Verb: "POST", Resource: "pods", P99: 6.8}, {Verb: "LIST", Resource: "pods", P99: 4}}
	if tg := judgeAPIFailover(r); tg.Met || tg.ServerP99OK || len(tg.Over) != 1 || tg.Over[0] != "kube-apiserver POST pods p99 6.80 s" {
		t.Errorf("POST pods p99 6.8 s: %+v", tg)
	}
	r = ok()
	r.Windows[1].Calls[0].P99Ms = 1500
	if tg := judgeAPIFailover(r); tg.Met || tg.ClientP99OK {
		t.Errorf("client p99 1.5 s: %+v", tg)
	}
	r = ok()
	r.AttemptErrors = []bench.ErrorCount{{Error: "500 InternalError: leader changed", Count: 1}}
	r.Windows[1].Server.APIErrors = append(r.Windows[1].Server.APIErrors, cluster.APIErrorCount{Verb: "POST", Resource: "pods", Code: "500", Count: 1})
	if tg := judgeAPIFailover(r); tg.Met || tg.OnlyRetriedTimeouts || tg.Server5xx != 1 {
		t.Errorf("an internal error: %+v", tg)
	}
	r = ok()
	r.AuditFailures = []bench.ErrorCount{{Error: "kwok UPDATE leases: 500: etcdserver: request timed out", Count: 3, Timeout: true}}
	if tg := judgeAPIFailover(r); !tg.Met {
		t.Errorf("store timeouts another client got: %+v", tg)
	}
	r.AuditFailures = append(r.AuditFailures, bench.ErrorCount{Error: "kube-scheduler CREATE pods/binding: 409 Conflict: rpc error: code = Unavailable desc = connection reset by peer", Count: 2})
	if tg := judgeAPIFailover(r); tg.Met || tg.OnlyRetriedTimeouts || len(tg.Failures) != 1 {
		t.Errorf("a connection reset another client got: %+v", tg)
	}
	r = ok()
	r.Check.Missing = 1
	if tg := judgeAPIFailover(r); tg.Met || tg.AllPresent {
		t.Errorf("a missing pod: %+v", tg)
	}
	r = ok()
	r.Check.RVOrder.Back = 1
	if tg := judgeAPIFailover(r); tg.Met || tg.RVOK {
		t.Errorf("a resourceVersion back: %+v", tg)
	}
	if tg := judgeAPIFailover(&apiFailoverResult{}); tg.Met {
		t.Error("no window measured: met")
	}
}

// kube-apiserver's audit log names every client's failures, the store errors it wraps in a
// 409 among them (its metric has the code only).
func TestAuditFailures(t *testing.T) {
	log := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"create","userAgent":"kube-scheduler/v1.36.3 (linux/amd64) kubernetes/abc","objectRef":{"resource":"pods","namespace":"meganode-load","name":"apif-28c684b2-004024","apiVersion":"v1","subresource":"binding"},"responseStatus":{"metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods/binding \"apif-28c684b2-004024\": rpc error: code = Unavailable desc = error reading from server: EOF","reason":"Conflict","code":409},"requestReceivedTimestamp":"2026-11-29T00:09:12.060000Z","stageTimestamp":"2026-11-29T00:09:12.077000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"update","userAgent":"kwok/v0.8.0","objectRef":{"resource":"leases","namespace":"kube-node-lease","name":"kwok-node-000076","apiVersion":"coordination.k8s.io/v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"etcdserver: request timed out, possibly due to previous leader failure","code":500},"requestReceivedTimestamp":"2026-11-29T00:09:12.050000Z","stageTimestamp":"2026-11-29T00:09:12.070000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"update","userAgent":"kwok/v0.8.0","objectRef":{"resource":"leases","namespace":"kube-node-lease","name":"kwok-node-000077","apiVersion":"coordination.k8s.io/v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"etcdserver: request timed out, possibly due to previous leader failure","code":500},"requestReceivedTimestamp":"2026-11-29T00:09:12.051000Z","stageTimestamp":"2026-11-29T00:09:12.071000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"get","userAgent":"kube-controller-manager/v1.36.3","objectRef":{"resource":"configmaps","name":"x"},"responseStatus":{"metadata":{},"status":"Failure","reason":"NotFound","code":404},"requestReceivedTimestamp":"2026-11-29T00:09:12.051000Z","stageTimestamp":"2026-11-29T00:09:12.052000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"get","userAgent":"kube-apiserver/v1.36.3","requestURI":"/readyz","responseStatus":{"metadata":{},"code":500},"requestReceivedTimestamp":"2026-11-29T00:09:12.051000Z","stageTimestamp":"2026-11-29T00:09:12.055000Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"create","userAgent":"meganode","objectRef":{"resource":"pods"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-11-29T00:09:12.051000Z","stageTimestamp":"2026-11-29T00:09:12.055000Z"}
`
	got := auditFailures(strings.NewReader(log))
	if len(got) != 3 {
		t.Fatalf("%d failures, want 3 (a 404, a 201 and /readyz are none): %+v", len(got), got)
	}
	if c := got[0]; c.Code != 409 || c.Timeout || c.Verb != "CREATE" || c.Resource != "pods/binding" || c.Dur != 17*time.Millisecond ||
		c.Err != "kube-scheduler CREATE pods/binding: 409 Conflict: Operation cannot be fulfilled on pods/binding \"<pod>\": rpc error: code = Unavailable desc = error reading from server: EOF" {
		t.Errorf("the binding: %+v", c)
	}
	if c := got[1]; c.Code != 500 || !c.Timeout || c.Err != "kwok UPDATE leases: 500: etcdserver: request timed out, possibly due to previous leader failure" {
		t.Errorf("the lease: %+v", c)
	}
	// Counted per window (by the answer's time) as the client's errors are.
	at := time.Date(2026, 11, 29, 0, 9, 12, 0, time.UTC)
	errs := bench.CountErrors(got, bench.Window{From: at, To: at.Add(80 * time.Millisecond)})
	if len(errs) != 2 || errs[0].Count != 2 || !errs[0].Timeout || errs[1].Timeout {
		t.Errorf("per window: %+v", errs)
	}
	if e := bench.CountErrors(got, bench.Window{From: at, To: at.Add(71 * time.Millisecond)}); len(e) != 1 || e[0].Count != 1 {
		t.Errorf("window ending before the second lease's answer: %+v", e)
	}
}

// client-go asks for protobuf: an error answer's Status is decoded either way.
func TestDecodeStatus(t *testing.T) {
	st := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 500,
		Message: "etcdserver: request timed out, possibly due to previous leader failure"}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var pb bytes.Buffer
	if err := info.Serializer.Encode(st, &pb); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(st)
	for name, b := range map[string][]byte{"protobuf": pb.Bytes(), "json": js} {
		got, ok := decodeStatus(b)
		if !ok || got.Code != 500 || got.Message != st.Message {
			t.Errorf("%s: %v %+v", name, ok, got)
		}
	}
	if _, ok := decodeStatus([]byte("<html>bad gateway</html>")); ok {
		t.Error("decoded a page that is no Status")
	}
	// The store's timeout, passed through as a 500 without a reason, is a timeout.
	if class, to := classifyErr(&apierrors.StatusError{ErrStatus: *st}); !to || class != "500: etcdserver: request timed out, possibly due to previous leader failure" {
		t.Errorf("store timeout: %q %v", class, to)
	}
}
