package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

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

// The gone confirmation on its own: a bind that found the pod gone is checked with a GET; a pod
// stored late is sent again, a pod never stored is dropped once the grace is over.
func TestWebhookIntakeConfirmsGone(t *testing.T) {
	metrics.Reset()
	cs := fakeapi.NewClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &schedtest.CountSink{}
	col := handDecidedCollector()
	in := New(Config{Client: cs, Collectors: 1, Root: root, Source: ModeWebhook,
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
	col := handDecidedCollector()
	in := New(Config{Client: cs, Collectors: 1, Root: &schedtest.CountSink{}, Source: ModeWebhook}, col)
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
