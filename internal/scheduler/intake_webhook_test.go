package scheduler

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The handler: every well-formed review is allowed (it only observes); only non-dry-run pod
// CREATEs for a served scheduler without a node are taken; a malformed body is a 400.
func TestWebhookHandler(t *testing.T) {
	metrics.Reset()
	var mu sync.Mutex
	var took []string
	h := NewWebhookHandler("meganode, default-scheduler", func(p *corev1.Pod) {
		mu.Lock()
		took = append(took, p.Namespace+"/"+p.Name)
		mu.Unlock()
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	ours := fakeapi.Pod("ns", "ours", "meganode", 100, 64)
	noNS := fakeapi.Pod("", "no-ns", "default-scheduler", 100, 64) // namespace only in the request
	assigned := fakeapi.Pod("ns", "assigned", "meganode", 100, 64)
	assigned.Spec.NodeName = "n1"
	noUID := fakeapi.Pod("ns", "no-uid", "meganode", 100, 64)
	noUID.UID = ""
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}}
	cases := []struct {
		name    string
		body    []byte
		counter string
	}{
		{"pod for us", schedtest.Review(t, ours, schedtest.PodKind, admissionv1.Create, false), "offered"},
		{"dry run", schedtest.Review(t, fakeapi.Pod("ns", "dry", "meganode", 100, 64), schedtest.PodKind, admissionv1.Create, true), "dry_run"},
		{"other scheduler", schedtest.Review(t, fakeapi.Pod("ns", "theirs", "other-scheduler", 100, 64), schedtest.PodKind, admissionv1.Create, false), "other_scheduler"},
		{"not a pod", schedtest.Review(t, cm, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, admissionv1.Create, false), "not_pod"},
		{"update", schedtest.Review(t, fakeapi.Pod("ns", "upd", "meganode", 100, 64), schedtest.PodKind, admissionv1.Update, false), "not_create"},
		{"already assigned", schedtest.Review(t, assigned, schedtest.PodKind, admissionv1.Create, false), "assigned"},
		{"no uid", schedtest.Review(t, noUID, schedtest.PodKind, admissionv1.Create, false), "no_uid"},
		{"namespace from the request", bytes.Replace(schedtest.Review(t, noNS, schedtest.PodKind, admissionv1.Create, false),
			[]byte(`"operation"`), []byte(`"namespace":"req-ns","operation"`), 1), "offered"},
	}
	for _, c := range cases {
		before := metrics.Counter("webhook", c.counter)
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		var in admissionv1.AdmissionReview
		_ = json.Unmarshal(c.body, &in)
		switch {
		case err != nil || resp.StatusCode != http.StatusOK:
			t.Errorf("%s: status %d, %v", c.name, resp.StatusCode, err)
		case out.Response == nil || !out.Response.Allowed || out.Response.UID != in.Request.UID:
			t.Errorf("%s: response %+v, want allowed for request %s", c.name, out.Response, in.Request.UID)
		case out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview":
			t.Errorf("%s: answered as %s %s", c.name, out.APIVersion, out.Kind)
		}
		if metrics.Counter("webhook", c.counter) != before+1 {
			t.Errorf("%s: counter %s not bumped", c.name, c.counter)
		}
	}
	mu.Lock()
	if want := []string{"ns/ours", "req-ns/no-ns"}; strings.Join(took, ",") != strings.Join(want, ",") {
		t.Errorf("took %v, want %v", took, want)
	}
	mu.Unlock()

	for _, bad := range []string{"{", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, ""} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %q: status %d, want 400", bad, resp.StatusCode)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
	if n := metrics.Counter("webhook", "bad_requests"); n != 3 {
		t.Errorf("bad_requests %d, want 3", n)
	}
}

// poster posts reviews to a webhook served with a generated certificate, trusting only the CA
// bundle the scheduler wrote (what the apiserver's caBundle does).
type poster struct {
	url string
	c   *http.Client
}

func newPoster(t *testing.T, addr, caFile string) *poster {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA in " + caFile)
	}
	return &poster{url: "https://" + addr + WebhookPath,
		c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

func (p *poster) post(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	resp, err := p.c.Post(p.url, "application/json", bytes.NewReader(schedtest.Review(t, pod, schedtest.PodKind, admissionv1.Create, false)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook answered %d", resp.StatusCode)
	}
}

// Role all with the webhook intake against a fake apiserver: pods offered by the webhook over
// HTTPS are bound; a pod created but never offered is found by the reconcile LIST; a pod
// offered but never created is dropped after the grace (its bind found it gone); a pod offered
// before it is stored is still bound; an unschedulable pod deleted is dropped by the LIST.
func TestWebhookIntakeSystem(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	for i := range 6 {
		objs = append(objs, fakeapi.Node(fmt.Sprintf("wn-%d", i), 1000, 4096, 110, nil))
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, caFile := freeAddr(t), filepath.Join(t.TempDir(), "pki", "ca.crt")
	sys, err := StartAll(ctx, Config{Client: cs, Shards: 2, Collectors: 2, Deadline: 100 * time.Millisecond, DeadAfter: -1,
		Intake: IntakeWebhook, Webhook: WebhookOptions{Addr: addr, CAFile: caFile,
			ReconcileEvery: 300 * time.Millisecond, ConfirmGrace: 400 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p := newPoster(t, addr, caFile)
	const n = 20
	for i := range n { // offered, then stored (as kube-apiserver does)
		pod := fakeapi.Pod("default", fmt.Sprintf("wh-%02d", i), podspec.DefaultSchedulerName, 100, 64)
		p.post(t, pod)
		schedtest.CreatePods(t, cs, pod)
	}
	schedtest.CreatePods(t, cs, fakeapi.Pod("default", "missed", podspec.DefaultSchedulerName, 100, 64)) // the webhook was skipped
	p.post(t, fakeapi.Pod("default", "never-stored", podspec.DefaultSchedulerName, 100, 64))             // creation failed after admission
	late := fakeapi.Pod("default", "late", podspec.DefaultSchedulerName, 100, 64)
	p.post(t, late) // offered, stored only afterwards
	time.Sleep(30 * time.Millisecond)
	schedtest.CreatePods(t, cs, late)
	stuck := fakeapi.Pod("default", "too-big", podspec.DefaultSchedulerName, 100000, 64)
	p.post(t, stuck)
	schedtest.CreatePods(t, cs, stuck)

	schedtest.WaitFor(t, 10*time.Second, "every stored pod bound", func() bool {
		got := schedtest.WaitBound(t, cs, "default", 0, 0)
		bound := 0
		for _, q := range got {
			if q.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n+2
	})
	sum := func(c string) (s int64) {
		for i := range 2 {
			s += metrics.Counter(fmt.Sprintf("intake/%d", i), c)
		}
		return s
	}
	if got := sum("pods_from_webhook"); got != n+3 {
		t.Errorf("pods_from_webhook %d, want %d", got, n+3)
	}
	if got := sum("pods_from_reconcile"); got != 1 {
		t.Errorf("pods_from_reconcile %d, want 1 (the missed pod)", got)
	}
	// The never-stored pod goes (its bind found it gone and a GET after the grace confirmed
	// it, or a LIST after the grace did not show it); the unschedulable one stays.
	schedtest.WaitFor(t, 5*time.Second, "never-stored pod dropped", func() bool { return sys.Pending() == 1 })
	if err := cs.CoreV1().Pods("default").Delete(ctx, stuck.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	schedtest.WaitFor(t, 5*time.Second, "deleted unschedulable pod dropped", func() bool { return sys.Pending() == 0 })
	// Each pod left the intake once: bound ones mostly on their bind result (a LIST may get
	// there first when an attempt takes longer than the grace), the other two as gone/not listed.
	if got := sum("dropped_bound") + sum("dropped_gone") + sum("dropped_not_listed"); got != n+4 {
		t.Errorf("dropped %d pods, want %d", got, n+4)
	}
	t.Logf("dropped: bound %d, gone %d, not listed %d; bind raced the pod's write %d time(s); gone rechecks %d",
		sum("dropped_bound"), sum("dropped_gone"), sum("dropped_not_listed"), sum("gone_but_there"), sum("gone_rechecks"))
}

// Distributed roles: two collectors, each serving the webhook; every pod is offered to
// collector 0, which forwards the ones that hash to collector 1 over gRPC.
func TestWebhookForwardsBetweenCollectors(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	for i := range 4 {
		objs = append(objs, fakeapi.Node(fmt.Sprintf("fn-%d", i), 4000, 8192, 110, nil))
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	shardAddrs := []string{freeAddr(t), freeAddr(t)}
	cols := []string{freeAddr(t), freeAddr(t)}
	hooks := []string{freeAddr(t), freeAddr(t)}
	run := func(role string, rc RoleConfig, wh WebhookOptions) {
		cfg := Config{Client: cs, Shards: 2, Collectors: 2, Deadline: 200 * time.Millisecond, Intake: IntakeWebhook, Webhook: wh}
		go func() {
			if err := RunRole(ctx, role, cfg, rc); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", role, err)
			}
		}()
	}
	for i, a := range shardAddrs {
		run("shard", RoleConfig{Index: i, Listen: a, Collectors: cols}, WebhookOptions{})
	}
	root := freeAddr(t)
	run("relay", RoleConfig{Listen: root, Children: shardAddrs}, WebhookOptions{})
	for i, a := range cols {
		run("collector", RoleConfig{Index: i, Listen: a, ShardAddrs: shardAddrs, Root: root, Collectors: cols},
			WebhookOptions{Addr: hooks[i], CAFile: filepath.Join(dir, fmt.Sprint(i), "ca.crt"), ReconcileEvery: time.Hour})
	}
	caFile := filepath.Join(dir, "0", "ca.crt")
	schedtest.WaitFor(t, 5*time.Second, "collector 0's webhook", func() bool { _, err := os.Stat(caFile); return err == nil })
	time.Sleep(500 * time.Millisecond) // informers sync, streams connect
	p := newPoster(t, hooks[0], caFile)
	const n = 20
	toOne := 0
	for i := range n {
		pod := fakeapi.Pod("default", fmt.Sprintf("fw-%02d", i), podspec.DefaultSchedulerName, 100, 64)
		if wire.CollectorOf(pod.Namespace, pod.Name, 2) == 1 {
			toOne++
		}
		schedtest.CreatePods(t, cs, pod)
		p.post(t, pod)
	}
	schedtest.WaitFor(t, 15*time.Second, "all pods bound", func() bool {
		bound := 0
		for _, q := range schedtest.WaitBound(t, cs, "default", 0, 0) {
			if q.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n
	})
	if toOne == 0 {
		t.Fatal("no pod hashes to collector 1: the test proves nothing")
	}
	if got := metrics.Counter("webhook", "forwarded_in"); got != int64(toOne) {
		t.Errorf("forwarded to collector 1: %d, want %d", got, toOne)
	}
	if a, b := metrics.Counter("intake/0", "pods_from_webhook"), metrics.Counter("intake/1", "pods_from_webhook"); a+b != n || b != int64(toOne) {
		t.Errorf("pods_from_webhook: collector 0 %d, collector 1 %d; want %d and %d", a, b, n-toOne, toOne)
	}
}

// The gone confirmation on its own: a bind that found the pod gone is checked with a GET; a pod
// stored late is sent again, a pod never stored is dropped once the grace is over.
func TestWebhookIntakeConfirmsGone(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &schedtest.CountSink{}
	col := collector.New(collector.Config{Shards: map[int]wire.DecisionSink{}, Live: func() []int { return []int{0} }, NoAnswerTimeout: time.Hour})
	in := NewIntake(IntakeConfig{Client: cs, Collectors: 1, Root: root, Source: IntakeWebhook,
		Webhook: WebhookOptions{ReconcileEvery: time.Hour, ConfirmGrace: 500 * time.Millisecond}}, col)
	go func() { _ = in.Run(ctx) }()
	ghost := fakeapi.Pod("default", "ghost", podspec.DefaultSchedulerName, 10, 1)
	racer := fakeapi.Pod("default", "racer", podspec.DefaultSchedulerName, 10, 1)
	if !in.Offer(ghost) || !in.Offer(racer) || in.Offer(racer) {
		t.Fatal("Offer: want true for new pods, false for a known one")
	}
	schedtest.WaitFor(t, 2*time.Second, "two frames", func() bool { return root.N.Load() == 2 })
	for _, p := range []*corev1.Pod{ghost, racer} {
		k := wire.AttemptKey{UID: string(p.UID)}
		in.Decided(k)
		in.Finished(k, "n1", false) // the Binding said NotFound
	}
	time.Sleep(50 * time.Millisecond)
	schedtest.CreatePods(t, cs, racer) // stored after its bind was tried
	schedtest.WaitFor(t, 2*time.Second, "racer sent again", func() bool { return root.N.Load() == 3 })
	h, _, _ := wire.SplitFrame(root.Last())
	if h.Name != "racer" || h.Attempt != 1 {
		t.Fatalf("resent %s attempt %d, want racer attempt 1", h.Name, h.Attempt)
	}
	schedtest.WaitFor(t, 2*time.Second, "ghost dropped", func() bool { return metrics.Counter("intake/0", "dropped_gone") == 1 })
	if in.Pending() != 1 || metrics.Counter("intake/0", "gone_but_there") != 1 {
		t.Fatalf("pending %d, gone_but_there %d; want 1 and 1", in.Pending(), metrics.Counter("intake/0", "gone_but_there"))
	}
	in.Decided(h.Key())
	in.Finished(h.Key(), "n1", true)
	if in.Pending() != 0 || metrics.Counter("intake/0", "dropped_bound") != 1 {
		t.Fatalf("after the bind: pending %d, dropped_bound %d", in.Pending(), metrics.Counter("intake/0", "dropped_bound"))
	}
	if root.N.Load() != 3 {
		t.Fatalf("%d frames sent, want 3", root.N.Load())
	}
}

// A LIST that began before a pod was bound still shows it unscheduled: the reconcile must not
// take it back in (it would be sent again, only for its bind to find it assigned).
func TestWebhookReconcileIgnoresPodsBoundDuringList(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient()
	pod := fakeapi.Pod("default", "bound-meanwhile", podspec.DefaultSchedulerName, 10, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		return true, &corev1.PodList{Items: []corev1.Pod{*pod}}, nil // the snapshot before the bind
	})
	col := collector.New(collector.Config{Shards: map[int]wire.DecisionSink{}, Live: func() []int { return []int{0} }, NoAnswerTimeout: time.Hour})
	in := NewIntake(IntakeConfig{Client: cs, Collectors: 1, Root: &schedtest.CountSink{}, Source: IntakeWebhook}, col)
	in.Offer(pod)
	done := make(chan error)
	go func() { done <- in.reconcile(context.Background()) }()
	<-entered
	in.Finished(wire.AttemptKey{UID: string(pod.UID)}, "n1", true) // bound while the LIST runs
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if in.Pending() != 0 || metrics.Counter("intake/0", "pods_from_reconcile") != 0 || metrics.Counter("intake/0", "reconcile_stale") != 1 {
		t.Fatalf("pending %d, pods_from_reconcile %d, reconcile_stale %d; want 0, 0, 1", in.Pending(),
			metrics.Counter("intake/0", "pods_from_reconcile"), metrics.Counter("intake/0", "reconcile_stale"))
	}
}
