package scheduler

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

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
	return &poster{url: "https://" + addr + intake.WebhookPath,
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
	cs := fakeapi.NewClient(fakeapi.Nodes("wn", 6, 1000, 4096)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, caFile := freeAddr(t), filepath.Join(t.TempDir(), "pki", "ca.crt")
	sys, err := StartAll(ctx, Config{Client: cs, Shards: 2, Collectors: 2, Deadline: 100 * time.Millisecond, DeadAfter: -1,
		Intake: intake.ModeWebhook, Webhook: intake.WebhookOptions{Addr: addr, CAFile: caFile,
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
	cs := fakeapi.NewClient(fakeapi.Nodes("fn", 4, 4000, 8192)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	shardAddrs := []string{freeAddr(t), freeAddr(t)}
	cols := []string{freeAddr(t), freeAddr(t)}
	hooks := []string{freeAddr(t), freeAddr(t)}
	run := func(role string, rc RoleConfig, wh intake.WebhookOptions) {
		cfg := Config{Client: cs, Shards: 2, Collectors: 2, Deadline: 200 * time.Millisecond, Intake: intake.ModeWebhook, Webhook: wh}
		go func() {
			if err := RunRole(ctx, role, cfg, rc); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", role, err)
			}
		}()
	}
	for i, a := range shardAddrs {
		run("shard", RoleConfig{Index: i, Listen: a, Collectors: cols}, intake.WebhookOptions{})
	}
	root := freeAddr(t)
	run("relay", RoleConfig{Listen: root, Children: shardAddrs}, intake.WebhookOptions{})
	for i, a := range cols {
		run("collector", RoleConfig{Index: i, Listen: a, ShardAddrs: shardAddrs, Root: root, Collectors: cols},
			intake.WebhookOptions{Addr: hooks[i], CAFile: filepath.Join(dir, fmt.Sprint(i), "ca.crt"), ReconcileEvery: time.Hour})
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
