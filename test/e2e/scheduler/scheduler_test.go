// Package scheduler is the end-to-end test of the meganode scheduler on an `up` cluster
// (kube-apiserver v1.36.3 on meganode-store, controller-manager, KWOK, and `meganode scheduler`
// with 3 shards instead of kube-scheduler). It fails, not skips, without the binaries.
package scheduler

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/cluster"
	msched "github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

const (
	nodes  = 50
	shards = 3
)

func binDir(t *testing.T) string {
	t.Helper()
	bd, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckBins(bd, cluster.StoreMeganode); err != nil {
		t.Fatalf("the scheduler e2e test needs the binaries `make` builds: %v", err)
	}
	if _, err := os.Stat(filepath.Join(bd, "meganode")); err != nil {
		t.Fatalf("the scheduler e2e test needs bin/meganode (`make meganode`): %v", err)
	}
	return bd
}

func pod(ns, name, sched string, cpu string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{SchedulerName: sched, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	}
}

func create(t *testing.T, ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	sem := make(chan struct{}, 32)
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// waitBound waits until want pods of ns are bound (or timeout), then returns the list.
func waitBound(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, want int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pl, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pl.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		if n >= want || time.Now().After(deadline) {
			if n < want {
				t.Fatalf("%d of %d pods in %s bound after %s", n, want, ns, timeout)
			}
			return pl.Items
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkNoOvercommit reads every node and pod from the apiserver and fails if any node's CPU or
// memory requests exceed its allocatable.
func checkNoOvercommit(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpu, mem, cnt := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, p := range pl.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		cnt[p.Spec.NodeName]++
		for _, c := range p.Spec.Containers {
			cpu[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
			mem[p.Spec.NodeName] += c.Resources.Requests.Memory().Value()
		}
	}
	for _, n := range nl.Items {
		a := n.Status.Allocatable
		if cpu[n.Name] > a.Cpu().MilliValue() || mem[n.Name] > a.Memory().Value() || cnt[n.Name] > a.Pods().Value() {
			t.Errorf("node %s over-committed: cpu %dm/%dm mem %d/%d pods %d/%d", n.Name, cpu[n.Name], a.Cpu().MilliValue(),
				mem[n.Name], a.Memory().Value(), cnt[n.Name], a.Pods().Value())
		}
	}
}

func deleteAll(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete pods in %s: %v", ns, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pl, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pl.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods left in %s", len(pl.Items), ns)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// schedulerMetric sums a counter over components on the meganode scheduler's /metrics.
func schedulerMetric(t *testing.T, st *cluster.State, name, componentPrefix string) int64 {
	t.Helper()
	for _, c := range st.Components {
		if c.Kind != cluster.KindMeganodeScheduler {
			continue
		}
		resp, err := http.Get(c.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		re := regexp.MustCompile(`(?m)^meganode_scheduler_` + name + `\{component="` + componentPrefix + `[^"]*"\} (\d+)$`)
		var sum int64
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			sum += v
		}
		return sum
	}
	t.Fatal("no meganode-scheduler component")
	return 0
}

// upMeganode starts an `up` cluster on meganode-store with o's scheduler options (StateDir,
// store and BinDir filled in), stops it when the test ends — dumping the scheduler's and the
// apiserver's log tails when the test failed — and returns it with a clientset.
func upMeganode(ctx context.Context, t *testing.T, o cluster.UpOptions) (*cluster.State, kubernetes.Interface) {
	t.Helper()
	o.StateDir, o.Store, o.StoreShards, o.BinDir = filepath.Join(t.TempDir(), "cluster"), cluster.StoreMeganode, 1, binDir(t)
	began := time.Now()
	st, err := cluster.Up(ctx, o)
	if st != nil {
		t.Cleanup(func() {
			if t.Failed() {
				for _, c := range st.Components {
					if c.Kind == cluster.KindMeganodeScheduler || c.Kind == cluster.BinAPIServer {
						b, _ := os.ReadFile(c.Log)
						s := string(b)
						if len(s) > 4000 {
							s = s[len(s)-4000:]
						}
						t.Logf("--- %s:\n%s", c.Log, s)
					}
				}
			}
			_ = st.Down(10*time.Second, nil)
		})
	}
	if err != nil {
		t.Fatalf("up --scheduler %s --shards %d --intake %q: %v", o.Scheduler, o.SchedulerShards, o.SchedulerIntake, err)
	}
	t.Logf("up with %d nodes, %d scheduler shards (intake %q) in %.1fs", o.Nodes, o.SchedulerShards, o.SchedulerIntake, time.Since(began).Seconds())
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	return st, cs
}

func TestMeganodeSchedulerOnCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st, cs := upMeganode(ctx, t, cluster.UpOptions{Nodes: nodes, Scheduler: cluster.SchedulerMeganode, SchedulerShards: shards})
	const ns = "sched-e2e"
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
	name := cluster.MeganodeSchedulerName

	t.Run("selectors and taints", func(t *testing.T) {
		nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		taint := corev1.Taint{Key: "meganode.io/e2e", Value: "dedicated", Effect: corev1.TaintEffectNoSchedule}
		tainted := map[string]bool{}
		zone := map[string]string{}
		for i, n := range nl.Items {
			zone[n.Name] = n.Labels["topology.kubernetes.io/zone"]
			if i%5 == 0 {
				tainted[n.Name] = true
				for {
					cur, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					cur.Spec.Taints = append(cur.Spec.Taints, taint)
					if _, err = cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
						break
					}
				}
			}
		}
		z0 := zone[nl.Items[1].Name]
		time.Sleep(time.Second) // the shards' node informers see the taints
		var pods []*corev1.Pod
		for i := range 40 {
			p := pod(ns, fmt.Sprintf("zone-%02d", i), name, "50m")
			p.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": z0}
			pods = append(pods, p)
		}
		for i := range 40 {
			pods = append(pods, pod(ns, fmt.Sprintf("plain-%02d", i), name, "50m"))
		}
		var tol []*corev1.Pod
		for n := range tainted {
			p := pod(ns, "tol-"+n, name, "50m")
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n}
			p.Spec.Tolerations = []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}}
			tol = append(tol, p)
		}
		pods = append(pods, tol...)
		never := pod(ns, "never", name, "50m")
		never.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "nowhere"}
		pods = append(pods, never)
		create(t, ctx, cs, pods)
		got := waitBound(t, ctx, cs, ns, len(pods)-1, 60*time.Second)
		time.Sleep(2 * time.Second)
		for _, p := range got {
			switch {
			case p.Name == "never":
				if p.Spec.NodeName != "" {
					t.Errorf("pod with an impossible selector bound to %s", p.Spec.NodeName)
				}
			case strings.HasPrefix(p.Name, "zone-") && zone[p.Spec.NodeName] != z0:
				t.Errorf("%s wants zone %s, bound to %s in %s", p.Name, z0, p.Spec.NodeName, zone[p.Spec.NodeName])
			case strings.HasPrefix(p.Name, "zone-") || strings.HasPrefix(p.Name, "plain-"):
				if tainted[p.Spec.NodeName] {
					t.Errorf("%s does not tolerate the taint, bound to tainted %s", p.Name, p.Spec.NodeName)
				}
			case strings.HasPrefix(p.Name, "tol-") && p.Spec.NodeName != strings.TrimPrefix(p.Name, "tol-"):
				t.Errorf("%s bound to %s", p.Name, p.Spec.NodeName)
			}
		}
		deleteAll(t, ctx, cs, ns)
		for n := range tainted {
			for {
				cur, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				cur.Spec.Taints = nil
				if _, err = cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
					break
				}
			}
		}
	})

	t.Run("race for the last capacity", func(t *testing.T) {
		// 8-CPU nodes, 3-CPU pods: two fit per node, 100 in all; 160 race for them.
		boundBefore := schedulerMetric(t, st, "bound", "collector/")
		time.Sleep(time.Second)
		var pods []*corev1.Pod
		for i := range 160 {
			pods = append(pods, pod(ns, fmt.Sprintf("big-%03d", i), name, "3"))
		}
		create(t, ctx, cs, pods)
		got := waitBound(t, ctx, cs, ns, 2*nodes, 90*time.Second)
		time.Sleep(3 * time.Second) // any wrongful extra bind would land now
		got = waitBound(t, ctx, cs, ns, 0, 0)
		bound := 0
		for _, p := range got {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		if bound != 2*nodes {
			t.Errorf("%d pods bound, want exactly %d (two per node)", bound, 2*nodes)
		}
		checkNoOvercommit(t, ctx, cs)
		// Bound exactly once: the scheduler's successful binds equal the bound pods.
		if n := schedulerMetric(t, st, "bound", "collector/") - boundBefore; n != int64(bound) {
			t.Errorf("scheduler reports %d successful binds for %d bound pods", n, bound)
		}
		t.Logf("%d bound, conflicts requeued %d, unschedulable rounds %d", bound,
			schedulerMetric(t, st, "conflicts", "collector/"), schedulerMetric(t, st, "unschedulable", "collector/"))
		deleteAll(t, ctx, cs, ns)
	})

	t.Run("every pod bound exactly once", func(t *testing.T) {
		boundBefore := schedulerMetric(t, st, "bound", "collector/")
		var pods []*corev1.Pod
		for i := range 300 {
			pods = append(pods, pod(ns, fmt.Sprintf("small-%03d", i), name, "100m"))
		}
		began := time.Now()
		create(t, ctx, cs, pods)
		got := waitBound(t, ctx, cs, ns, len(pods), 90*time.Second)
		t.Logf("300 pods bound in %.1fs", time.Since(began).Seconds())
		seen := map[string]bool{}
		for _, p := range got {
			if p.Spec.NodeName == "" || seen[p.Name] {
				t.Errorf("%s: node %q", p.Name, p.Spec.NodeName)
			}
			seen[p.Name] = true
		}
		// A bind's answer reaches the scheduler (which counts it) a moment after the
		// apiserver's watch shows the pod bound: the count may trail, never exceed.
		n := schedulerMetric(t, st, "bound", "collector/") - boundBefore
		for wait := time.Now().Add(5 * time.Second); n < int64(len(pods)) && time.Now().Before(wait); {
			time.Sleep(50 * time.Millisecond)
			n = schedulerMetric(t, st, "bound", "collector/") - boundBefore
		}
		if n != int64(len(pods)) {
			t.Errorf("scheduler reports %d successful binds for %d pods", n, len(pods))
		}
		checkNoOvercommit(t, ctx, cs)
		deleteAll(t, ctx, cs, ns)
	})

	t.Run("killed shard taken over", func(t *testing.T) {
		// A second meganode scheduler in this process (its own spec.schedulerName), so a shard
		// can be killed: its nodes go to the survivors and its pods still get scheduled.
		const inproc = "meganode-inproc"
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		sys, err := msched.StartAll(sctx, msched.Config{Kubeconfig: st.Kubeconfig, SchedulerName: inproc, Shards: 3,
			Deadline: 100 * time.Millisecond, DeadAfter: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var first []*corev1.Pod
		for i := range 30 {
			first = append(first, pod(ns, fmt.Sprintf("pre-%02d", i), inproc, "100m"))
		}
		create(t, ctx, cs, first)
		waitBound(t, ctx, cs, ns, 30, 60*time.Second)
		victim := map[string]bool{}
		nl, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		for _, n := range nl.Items {
			if wire.Owner(n.Name, wire.AllShards(3)) == 1 {
				victim[n.Name] = true
			}
		}
		sys.KillShard(1)
		// 8-CPU nodes hold 2 pods of 3.5 CPU: 100 such pods need every node, shard 1's too.
		var more []*corev1.Pod
		for i := range 2 * nodes {
			more = append(more, pod(ns, fmt.Sprintf("post-%03d", i), inproc, "3500m"))
		}
		// The 30 small pods take 3 CPU: make room by deleting them first.
		deleteAll(t, ctx, cs, ns)
		create(t, ctx, cs, more)
		got := waitBound(t, ctx, cs, ns, 2*nodes, 120*time.Second)
		onVictim := 0
		for _, p := range got {
			if victim[p.Spec.NodeName] {
				onVictim++
			}
		}
		if onVictim == 0 {
			t.Errorf("no pod on the %d nodes of the killed shard", len(victim))
		}
		if live := sys.Live(); len(live) != 2 {
			t.Errorf("live shards %v after killing shard 1", live)
		}
		checkNoOvercommit(t, ctx, cs)
		t.Logf("shard 1 killed: its %d nodes took %d pods after the takeover", len(victim), onVictim)
		deleteAll(t, ctx, cs, ns)
	})

	// After the pods above, on the same cluster: the Grafana dashboard's metrics exist.
	t.Run("grafana dashboard metrics exported", func(t *testing.T) { checkDashboard(ctx, t, st) })
}
