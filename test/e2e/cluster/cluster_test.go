// Package cluster is the end-to-end test of `meganode up`: a real kube-apiserver v1.36.3,
// controller-manager, scheduler and KWOK on meganode-store, exercised through client-go,
// with a store crash and restart in the middle.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/cluster"
)

const (
	nodes = 100
	pods  = 200
	ns    = "e2e"
)

// binDir finds bin/ at the repository root; the test fails (does not skip) without the binaries.
func binDir(t *testing.T) string {
	t.Helper()
	bd, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckBins(bd, cluster.StoreMeganode); err != nil {
		t.Fatalf("the cluster e2e test needs the binaries `make` builds: %v", err)
	}
	return bd
}

// tearDown stops the cluster (if Up started one) when the test ends, first printing every
// component's last log lines if the test failed.
func tearDown(t *testing.T, st *cluster.State) {
	if st == nil {
		return
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range st.Components {
				t.Logf("--- last lines of %s:\n%s", c.Log, lastLines(c.Log, 25))
			}
		}
		_ = st.Down(10*time.Second, nil)
	})
}

func TestClusterOnMeganodeStore(t *testing.T) {
	bd := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stateDir := filepath.Join(t.TempDir(), "cluster")
	began := time.Now()
	// MEGANODE_E2E_STORE_ARGS adds store flags (e.g. --durability-prefix=/registry/leases/=buffered).
	storeArgs := strings.Fields(os.Getenv("MEGANODE_E2E_STORE_ARGS"))
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: stateDir, Store: cluster.StoreMeganode, StoreShards: 1, Nodes: nodes, Pods: pods,
		BinDir: bd, StoreArgs: storeArgs})
	tearDown(t, st)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Logf("up with %d nodes in %.1fs", nodes, time.Since(began).Seconds())
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != "v1.36.3" {
		t.Fatalf("/version: %v %v", v, err)
	}
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}

	t.Run("crud-and-watch", func(t *testing.T) { crudAndWatch(ctx, t, cs) })

	run, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: ns, Count: pods, Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatalf("pods: %v", err)
	}
	t.Logf("%d pods Running: startup p50 %.0fms p99 %.0fms, %.0f scheduled/s", run.Running, run.Startup.P50Us/1e3, run.Startup.P99Us/1e3, run.ScheduledPerSec)
	assertPods(ctx, t, cs, pods)

	// A durable object written before the crash.
	durable := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "durable", Namespace: ns}, Data: map[string]string{"k": "before-crash"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, durable, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Crash the store (SIGKILL) and start it again on the same data directory and port.
	store := st.Component("store")
	oldPid := store.Pid
	if err := store.Kill(); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	time.Sleep(2 * time.Second) // let the apiserver notice
	if err := st.Restart("store"); err != nil {
		t.Fatal(err)
	}
	t.Logf("store restarted: pid %d → %d, same URL %s", oldPid, st.Component("store").Pid, st.Component("store").URL)

	// The apiserver reconnects.
	waitFor(ctx, t, 90*time.Second, "kube-apiserver /readyz after the store restart", func() error {
		h, ok := cluster.Health(ctx, st)
		if !ok {
			return fmt.Errorf("%v", h)
		}
		return nil
	})
	// Durable objects survive.
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "durable", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "before-crash" {
		t.Fatalf("durable ConfigMap after the restart: %v %v", cm, err)
	}
	waitFor(ctx, t, 60*time.Second, "all pods and nodes listed after the restart", func() error {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != pods {
			return fmt.Errorf("%d pods", len(l.Items))
		}
		nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(nl.Items) != nodes {
			return fmt.Errorf("%d nodes", len(nl.Items))
		}
		return nil
	})
	// Writes work again, and events come back: a new pod is scheduled, runs and gets its events.
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, cluster.PodObject(ns, "after-restart", "after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 60*time.Second, "pod after-restart Running with a Scheduled event", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "after-restart", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		ev, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=after-restart"})
		if err != nil {
			return err
		}
		for _, e := range ev.Items {
			if e.Reason == "Scheduled" {
				return nil
			}
		}
		return fmt.Errorf("%d events, none Scheduled", len(ev.Items))
	})

	// delete-pods, then down leaves nothing behind.
	if n, err := cluster.DeletePods(ctx, cs, ns, 2*time.Minute, nil); err != nil || n != pods+1 { // + after-restart
		t.Fatalf("delete pods: %d %v", n, err)
	}
	// Deployment mode: the controller-manager creates the replicas, the scheduler places them.
	const replicas = 20
	drun, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: ns, Count: replicas, Deployment: true, Timeout: 2 * time.Minute})
	if err != nil || drun.Mode != "deployment" || drun.Running != replicas {
		t.Fatalf("deployment of %d replicas: %+v %v", replicas, drun, err)
	}
	if ds, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err != nil || len(ds.Items) != 1 || ds.Items[0].Status.ReadyReplicas != replicas {
		ready := int32(-1)
		if err == nil && len(ds.Items) == 1 {
			ready = ds.Items[0].Status.ReadyReplicas
		}
		// ReadyReplicas lags the pods by a status sync; poll it.
		waitFor(ctx, t, 60*time.Second, "the Deployment reports every replica ready", func() error {
			ds, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(ds.Items) != 1 || ds.Items[0].Status.ReadyReplicas != replicas {
				return fmt.Errorf("deployments %v, ready (first look %d): %v", len(ds.Items), ready, err)
			}
			return nil
		})
	}
	if n, err := cluster.DeletePods(ctx, cs, ns, 2*time.Minute, nil); err != nil || n != replicas {
		t.Fatalf("delete the deployment's pods: %d %v", n, err)
	}
	// Leases keep renewing through KWOK after the crash. `up` makes /registry/leases/ durable
	// (cluster.KWOKLeaseDurability): KWOK cannot recreate a lease the store lost, see there.
	// (Checked last: nodes go NotReady if renewals stop.)
	if !eventually(ctx, t, 90*time.Second, "every node lease renewed after the restart", func() error {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		fresh := 0
		for _, le := range l.Items {
			if le.Spec.RenewTime != nil && le.Spec.RenewTime.After(crashed) {
				fresh++
			}
		}
		if fresh < nodes {
			return fmt.Errorf("%d of %d leases renewed since the crash (%d listed)", fresh, nodes, len(l.Items))
		}
		return nil
	}) {
		t.Errorf("node leases were not renewed after the store restart. If kwok.log shows \"Precondition failed: UID in precondition: …, UID in object meta: \" " +
			"the leases were lost in the restart: KWOK's informer (resourceVersion=0 watches) never learns of it and keeps updating them")
	} else if _, ready, err := cluster.CountReadyNodes(ctx, cs); err != nil || ready != nodes {
		t.Errorf("%d of %d nodes Ready after the restart (%v)", ready, nodes, err)
	}
	if err := st.Down(15*time.Second, nil); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, c := range st.Components {
		if c.Alive() {
			t.Errorf("%s (pid %d) still running after down", c.Name, c.Pid)
		}
	}
	if left := cluster.ProcessesUnder(st.Dir); len(left) > 0 {
		t.Errorf("processes still using %s after down: %v", st.Dir, left)
	}
}

func crudAndWatch(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	cms := cs.CoreV1().ConfigMaps(ns)
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=crud"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crud", Namespace: ns}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crud", Namespace: ns}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: want AlreadyExists, got %v", err)
	}
	got, err := cms.Get(ctx, "crud", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "1" {
		t.Fatalf("get: %v %v", got, err)
	}
	got.Data["a"] = "2"
	if _, err := cms.Update(ctx, got.DeepCopy(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.Data["a"] = "stale"
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) { // old resourceVersion
		t.Fatalf("stale update: want Conflict, got %v", err)
	}
	if _, err := cms.Patch(ctx, "crud", types.MergePatchType, []byte(`{"data":{"b":"3"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("list: %v", err)
	}
	// Paginated list of nodes (limit/continue).
	var seen int
	opts := metav1.ListOptions{Limit: 30}
	for {
		nl, err := cs.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(nl.Items)
		if nl.Continue == "" {
			break
		}
		opts.Continue = nl.Continue
	}
	if seen != nodes {
		t.Fatalf("paginated node list: %d, want %d", seen, nodes)
	}
	if err := cms.Delete(ctx, "crud", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "crud", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: want NotFound, got %v", err)
	}
	// Secrets, Services (ClusterIP allocation) and a Lease, create and delete.
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"p": "q"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "x"}}}, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(svc.Spec.ClusterIP, "10.96.") {
		t.Fatalf("service: %v %v", svc, err)
	}
	if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []func() error{
		func() error { return cs.CoreV1().Secrets(ns).Delete(ctx, "s", metav1.DeleteOptions{}) },
		func() error { return cs.CoreV1().Services(ns).Delete(ctx, "svc", metav1.DeleteOptions{}) },
		func() error { return cs.CoordinationV1().Leases(ns).Delete(ctx, "l", metav1.DeleteOptions{}) },
	} {
		if err := d(); err != nil {
			t.Fatal(err)
		}
	}
	// The watch saw ADDED, MODIFIED (update, patch), DELETED in order.
	want := []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Deleted}
	var gotEv []watch.EventType
	timeout := time.After(20 * time.Second)
	for len(gotEv) < len(want) {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", gotEv)
			}
			gotEv = append(gotEv, e.Type)
		case <-timeout:
			t.Fatalf("watch: got %v, want %v", gotEv, want)
		}
	}
	for i := range want {
		if gotEv[i] != want[i] {
			t.Fatalf("watch: got %v, want %v", gotEv, want)
		}
	}
}

func assertPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, n int) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range l.Items {
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running != n {
		t.Fatalf("%d of %d pods scheduled and Running", running, n)
	}
}

func waitFor(ctx context.Context, t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	if !eventually(ctx, t, d, what, f) {
		t.FailNow()
	}
}

// eventually polls f until it succeeds (true) or d passes (false, logged).
func eventually(ctx context.Context, t *testing.T, d time.Duration, what string, f func() error) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	began := time.Now()
	for {
		err := f()
		if err == nil {
			t.Logf("%s: after %.1fs", what, time.Since(began).Seconds())
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Logf("%s: not within %s: %v", what, d, err)
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
