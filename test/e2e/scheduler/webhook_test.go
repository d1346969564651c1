package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meganode/meganode/deploy/manifesttest"
	"github.com/meganode/meganode/internal/cluster"
)

// The webhook intake on an `up` cluster: `up --scheduler meganode --intake webhook` with 2
// shards on 20 nodes registers a ValidatingWebhookConfiguration (failurePolicy Ignore) whose
// URL is the scheduler's HTTPS webhook on 127.0.0.1. Pods must come in through the webhook and
// be bound exactly once; pods created while the scheduler is down (the apiserver skips the
// webhook) or stopped (the apiserver times out on it) must be bound once it is back (its
// reconcile LIST, or the late webhook); the deploy/scheduler manifests, the webhook ones
// included, deploy/store's, and the Helm chart rendered under two value sets must pass a server-side dry run.
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
		objs, from := readManifests(t, filepath.Join("..", "..", "..", "deploy", "scheduler"))
		if kinds := dryRunObjects(t, ctx, st, objs, from); kinds["ValidatingWebhookConfiguration"] == 0 {
			t.Errorf("no ValidatingWebhookConfiguration among the manifests (%v)", kinds)
		}
		objs, from = readManifests(t, filepath.Join("..", "..", "..", "deploy", "store"))
		if kinds := dryRunObjects(t, ctx, st, objs, from); kinds["StatefulSet"] != 3 {
			t.Errorf("deploy/store: %v, want 3 StatefulSets", kinds)
		}
	})

	// The chart (deploy/helm/meganode) rendered by `helm template` for a cluster that serves
	// prometheus-operator's ServiceMonitor: the defaults, and a webhook-intake install with 25
	// shards, the leases and events stores and TLS off. Its namespaces are created for real.
	t.Run("helm chart passes a server-side dry run", func(t *testing.T) {
		createServiceMonitorCRD(t, ctx, st)
		for _, c := range []struct {
			ns   string
			args []string
		}{
			{"meganode-chart", nil},
			{"meganode-chart-large", []string{"--set=scheduler.intake=webhook,scheduler.shards=25,scheduler.collectors=3",
				"--set=store.shards.leases.enabled=true,store.shards.events.enabled=true,store.tls.enabled=false"}},
		} {
			out := manifesttest.Helm(t, "meganode", c.ns, false, append(c.args, "--api-versions=monitoring.coreos.com/v1/ServiceMonitor")...)
			objs, from := splitObjects(t, "helm template "+strings.Join(c.args, " "), out)
			ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.ns}}}
			from[ns] = "(release namespace)"
			kinds := dryRunObjects(t, ctx, st, append([]*unstructured.Unstructured{ns}, objs...), from)
			for _, k := range []string{"StatefulSet", "Service", "ServiceAccount", "ClusterRoleBinding", "ServiceMonitor"} {
				if kinds[k] == 0 {
					t.Errorf("%s: no %s rendered (%v)", c.ns, k, kinds)
				}
			}
			if (kinds["ValidatingWebhookConfiguration"] > 0) != (len(c.args) > 0) {
				t.Errorf("%s: %d webhook configurations", c.ns, kinds["ValidatingWebhookConfiguration"])
			}
		}
	})
}

// serviceMonitorCRD is the part of prometheus-operator's ServiceMonitor CRD the chart uses: its
// field names and types as monitoring.coreos.com/v1 defines them (a field the chart wrote
// outside them is refused by the strict field validation of the dry run).
const serviceMonitorCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor, categories: [prometheus-operator], shortNames: [smon]}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              required: [selector]
              properties:
                jobLabel: {type: string}
                selector:
                  type: object
                  properties:
                    matchLabels: {type: object, additionalProperties: {type: string}}
                    matchExpressions:
                      type: array
                      items:
                        type: object
                        required: [key, operator]
                        properties:
                          key: {type: string}
                          operator: {type: string}
                          values: {type: array, items: {type: string}}
                namespaceSelector:
                  type: object
                  properties:
                    any: {type: boolean}
                    matchNames: {type: array, items: {type: string}}
                endpoints:
                  type: array
                  items:
                    type: object
                    properties:
                      port: {type: string}
                      path: {type: string}
                      scheme: {type: string, enum: [http, https, HTTP, HTTPS]}
                      interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      scrapeTimeout: {type: string}
`

// createServiceMonitorCRD creates the CRD (for real) and waits until discovery serves it.
func createServiceMonitorCRD(t *testing.T, ctx context.Context, st *cluster.State) {
	t.Helper()
	objs, _ := splitObjects(t, "serviceMonitorCRD", []byte(serviceMonitorCRD))
	rc, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, objs[0], metav1.CreateOptions{FieldValidation: "Strict"}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rl, err := cs.Discovery().ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
		if err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Kind == "ServiceMonitor" }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ServiceMonitor CRD not served after 30s: %v", err)
		}
	}
}

// readManifests reads every document of dir/*.yaml.
func readManifests(t *testing.T, dir string) ([]*unstructured.Unstructured, map[*unstructured.Unstructured]string) {
	t.Helper()
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
		o, fr := splitObjects(t, filepath.Base(f), b)
		objs = append(objs, o...)
		maps.Copy(from, fr)
	}
	return objs, from
}

// splitObjects decodes a multi-document YAML stream; from names each object's source.
func splitObjects(t *testing.T, name string, b []byte) ([]*unstructured.Unstructured, map[*unstructured.Unstructured]string) {
	t.Helper()
	var objs []*unstructured.Unstructured
	from := map[*unstructured.Unstructured]string{}
	for i, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(part), &m); err != nil {
			t.Fatalf("%s document %d: %v", name, i+1, err)
		}
		if len(m) == 0 {
			continue // comments only
		}
		u := &unstructured.Unstructured{Object: m}
		from[u] = name
		objs = append(objs, u)
	}
	return objs, from
}

// dryRunObjects creates every object with dryRun=All (namespaces for real, so the namespaced
// objects can be checked in them; an object that already exists is checked as a dry-run
// replacement), so the apiserver's validation and admission see the manifests as `kubectl
// create`/`replace` would send them. It returns the objects' count by kind.
func dryRunObjects(t *testing.T, ctx context.Context, st *cluster.State, objs []*unstructured.Unstructured,
	from map[*unstructured.Unstructured]string) map[string]int {
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
	var b bytes.Buffer
	for k, n := range kinds {
		fmt.Fprintf(&b, " %s×%d", k, n)
	}
	t.Logf("%d objects accepted:%s", len(objs), b.String())
	return kinds
}
