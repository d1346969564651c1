package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meganode/meganode/internal/cluster"
)

// The webhook intake on an `up` cluster: `up --scheduler meganode --intake webhook` with 2
// shards on 20 nodes registers a ValidatingWebhookConfiguration (failurePolicy Ignore) whose
// URL is the scheduler's HTTPS webhook on 127.0.0.1. Pods must come in through the webhook and
// be bound exactly once; pods created while the scheduler is down (the apiserver skips the
// webhook) or stopped (the apiserver times out on it) must be bound once it is back (its
// reconcile LIST, or the late webhook); the deploy/scheduler manifests, the webhook ones
// included, must pass a server-side dry run.
func TestMeganodeSchedulerWebhookIntake(t *testing.T) {
	const nodes, shards, pods = 20, 2, 100
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, cs := upMeganode(ctx, t, cluster.UpOptions{Nodes: nodes, Scheduler: cluster.SchedulerMeganode, SchedulerShards: shards,
		SchedulerIntake: cluster.IntakeWebhook, SchedulerArgs: []string{"--reconcile-every=2s"}})
	const ns = "webhook-e2e"
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
	name := cluster.MeganodeSchedulerName

	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cluster.SchedulerWebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook configuration up registers: %v", err)
	}
	wh := vwc.Webhooks[0]
	if *wh.FailurePolicy != admissionregistrationv1.Ignore || wh.ClientConfig.URL == nil ||
		!strings.HasPrefix(*wh.ClientConfig.URL, "https://127.0.0.1:") || len(wh.ClientConfig.CABundle) == 0 {
		t.Fatalf("webhook configuration: %+v", wh)
	}

	t.Run("pods come in through the webhook, bound once", func(t *testing.T) {
		fromWebhook := schedulerMetric(t, st, "pods_from_webhook", "intake/")
		fromList := schedulerMetric(t, st, "pods_from_reconcile", "intake/")
		boundBefore := schedulerMetric(t, st, "bound", "collector/")
		var ps []*corev1.Pod
		for i := range pods {
			ps = append(ps, pod(ns, fmt.Sprintf("wh-%03d", i), name, "100m"))
		}
		t0 := time.Now()
		create(t, ctx, cs, ps)
		got := waitBound(t, ctx, cs, ns, pods, 60*time.Second)
		t.Logf("%d pods bound in %.1fs", pods, time.Since(t0).Seconds())
		time.Sleep(time.Second) // a second bind would show now
		seen := map[string]bool{}
		for _, p := range got {
			if p.Spec.NodeName == "" || seen[p.Name] {
				t.Errorf("%s: node %q", p.Name, p.Spec.NodeName)
			}
			seen[p.Name] = true
		}
		if n := schedulerMetric(t, st, "bound", "collector/") - boundBefore; n != pods {
			t.Errorf("scheduler reports %d successful binds for %d pods", n, pods)
		}
		web := schedulerMetric(t, st, "pods_from_webhook", "intake/") - fromWebhook
		list := schedulerMetric(t, st, "pods_from_reconcile", "intake/") - fromList
		t.Logf("intake: %d pods from the webhook, %d from the reconcile LIST", web, list)
		// The webhook answers in microseconds; under load on a 2-core machine the apiserver
		// could still time out on a call (2 s) and the LIST take that pod: allow a few.
		if web+list != pods || web < pods-5 {
			t.Errorf("%d pods from the webhook and %d from the LIST, want %d from the webhook", web, list, pods)
		}
		checkNoOvercommit(t, ctx, cs)

		// A server-side dry run reaches the webhook (sideEffects NoneOnDryRun) and is ignored.
		dry := schedulerMetric(t, st, "dry_run", "webhook")
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "dry", name, "100m"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		if n := schedulerMetric(t, st, "dry_run", "webhook") - dry; n != 1 {
			t.Errorf("dry-run reviews seen: %d, want 1", n)
		}
		deleteAll(t, ctx, cs, ns)
	})

	t.Run("pods created while the scheduler is down", func(t *testing.T) {
		c := st.Component("meganode-scheduler")
		if c == nil {
			t.Fatal("no meganode-scheduler component")
		}
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		var ps []*corev1.Pod
		for i := range 5 {
			ps = append(ps, pod(ns, fmt.Sprintf("down-%d", i), name, "100m"))
		}
		t0 := time.Now()
		create(t, ctx, cs, ps) // the webhook is unreachable: failurePolicy Ignore lets them in
		t.Logf("5 pods created with the webhook down in %.1fs", time.Since(t0).Seconds())
		if err := st.Restart("meganode-scheduler"); err != nil {
			t.Fatal(err)
		}
		for { // healthz: informers synced and the webhook listening again
			resp, err := http.Get(st.Component("meganode-scheduler").URL + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatal("scheduler not healthy after the restart")
			}
			time.Sleep(100 * time.Millisecond)
		}
		waitBound(t, ctx, cs, ns, len(ps), 30*time.Second)
		t.Logf("bound %.1fs after they were created", time.Since(t0).Seconds())
		// A new process: its counters start at zero. Its first LIST found the 5 pods.
		if n := schedulerMetric(t, st, "pods_from_reconcile", "intake/"); n != int64(len(ps)) {
			t.Errorf("pods_from_reconcile %d after the restart, want %d", n, len(ps))
		}
		if n := schedulerMetric(t, st, "bound", "collector/"); n != int64(len(ps)) {
			t.Errorf("%d binds after the restart, want %d", n, len(ps))
		}
		deleteAll(t, ctx, cs, ns)
	})

	t.Run("pods created while the scheduler is stopped", func(t *testing.T) {
		// SIGSTOP: the webhook's port still accepts connections but nothing answers; the
		// apiserver waits timeoutSeconds, then (failurePolicy Ignore) creates the pod anyway.
		c := st.Component("meganode-scheduler")
		fromWebhook := schedulerMetric(t, st, "pods_from_webhook", "intake/")
		fromList := schedulerMetric(t, st, "pods_from_reconcile", "intake/")
		if err := syscall.Kill(c.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				_ = syscall.Kill(c.Pid, syscall.SIGCONT)
			}
		}
		defer resume()
		var ps []*corev1.Pod
		for i := range 3 {
			ps = append(ps, pod(ns, fmt.Sprintf("stopped-%d", i), name, "100m"))
		}
		t0 := time.Now()
		create(t, ctx, cs, ps)
		took := time.Since(t0)
		t.Logf("3 pods created with the scheduler stopped in %.1fs (webhook timeout %ds)", took.Seconds(), cluster.WebhookTimeoutSeconds)
		if took < time.Duration(cluster.WebhookTimeoutSeconds)*time.Second-200*time.Millisecond {
			t.Errorf("creates took %s: the webhook was not waited for", took)
		}
		resume()
		waitBound(t, ctx, cs, ns, len(ps), 30*time.Second)
		web := schedulerMetric(t, st, "pods_from_webhook", "intake/") - fromWebhook
		list := schedulerMetric(t, st, "pods_from_reconcile", "intake/") - fromList
		// Whether the reviews the apiserver gave up on are still handled once the process runs
		// again (then they count as webhook) or the LIST takes the pods is a race; both are fine.
		t.Logf("bound %.1fs after SIGCONT: %d from the (late) webhook, %d from the LIST", time.Since(t0.Add(took)).Seconds(), web, list)
		if web+list != int64(len(ps)) {
			t.Errorf("%d pods taken in, want %d", web+list, len(ps))
		}
		deleteAll(t, ctx, cs, ns)
	})

	t.Run("deploy manifests pass a server-side dry run", func(t *testing.T) {
		dryRunManifests(t, ctx, st, filepath.Join("..", "..", "..", "deploy", "scheduler"))
	})
}

// dryRunManifests creates every object of dir/*.yaml with dryRun=All (namespaces for real,
// so the namespaced objects can be checked in them; an object that already exists is checked
// as a dry-run replacement), so the apiserver's validation and admission see the manifests as
// `kubectl create`/`replace` would send them.
func dryRunManifests(t *testing.T, ctx context.Context, st *cluster.State, dir string) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	from := map[*unstructured.Unstructured]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(part), &m); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if len(m) == 0 {
				continue // comments only
			}
			u := &unstructured.Unstructured{Object: m}
			from[u] = filepath.Base(f)
			objs = append(objs, u)
		}
	}
	kinds := map[string]int{}
	for _, namespaces := range []bool{true, false} {
		for _, u := range objs {
			if (u.GetKind() == "Namespace") != namespaces {
				continue
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Errorf("%s %s: %v", gvk, u.GetName(), err)
				continue
			}
			var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
			if u.GetNamespace() != "" {
				ri = dc.Resource(m.Resource).Namespace(u.GetNamespace())
			}
			opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
			if namespaces {
				opts.DryRun = nil
			}
			_, err = ri.Create(ctx, u, opts)
			if apierrors.IsAlreadyExists(err) && !namespaces {
				// e.g. the webhook configuration `up` registered under the same name: check the
				// manifest as a replacement of it (`kubectl replace --dry-run=server`).
				var cur *unstructured.Unstructured
				if cur, err = ri.Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
					u.SetResourceVersion(cur.GetResourceVersion())
					_, err = ri.Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
				}
			}
			if err != nil && !(namespaces && apierrors.IsAlreadyExists(err)) {
				t.Errorf("%s: %s %s/%s: %v", from[u], gvk.Kind, u.GetNamespace(), u.GetName(), err)
			}
			kinds[gvk.Kind]++
		}
	}
	if kinds["ValidatingWebhookConfiguration"] == 0 {
		t.Errorf("no ValidatingWebhookConfiguration among the manifests (%v)", kinds)
	}
	var b bytes.Buffer
	for k, n := range kinds {
		fmt.Fprintf(&b, " %s×%d", k, n)
	}
	t.Logf("%d objects from %d files accepted:%s", len(objs), len(files), b.String())
}
