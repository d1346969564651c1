package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/cluster"
	msched "github.com/meganode/meganode/internal/scheduler"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The same constrained workload through the stock kube-scheduler and the meganode scheduler on
// one `up` cluster: `up` runs kube-scheduler (default-scheduler), and a 3-shard meganode
// scheduler runs in this process serving spec.schedulerName "meganode". Each scheduler gets
// its own namespace (pod affinity and spread selectors are namespace-scoped, so the two
// workloads do not see each other; the nodes are shared). For both, every placement must be
// feasible as judged from the apiserver's final state, and the same number of pods of each
// kind must be bound or left pending.

const (
	cmpNodes  = 12
	zoneLabel = "topology.kubernetes.io/zone"
	diskLabel = "meganode.io/disk"
	dedicated = "meganode.io/dedicated"
)

// constrainedWorkload is the input, for one scheduler in one namespace. want: bound per kind.
func constrainedWorkload(ns, sched string, untainted int) (pods []*corev1.Pod, want map[string]int) {
	mk := func(kind string, i int, lbl map[string]string) *corev1.Pod {
		p := pod(ns, fmt.Sprintf("%s-%02d", kind, i), sched, "50m")
		p.Labels = map[string]string{"kind": kind}
		for k, v := range lbl {
			p.Labels[k] = v
		}
		return p
	}
	want = map[string]int{}
	add := func(kind string, n, bound int, f func(p *corev1.Pod)) {
		for i := range n {
			p := mk(kind, i, nil)
			f(p)
			pods = append(pods, p)
		}
		want[kind] = bound
	}
	sel := func(k string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"kind": k}}
	}
	// nodeSelector on a zone.
	add("selector", 6, 6, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "zone-b"} })
	// Tolerations: only the tainted nodes carry the dedicated label.
	add("toleration", 3, 3, func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{dedicated: "true"}
		p.Spec.Tolerations = []corev1.Toleration{{Key: dedicated, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	})
	add("plain", 6, 6, func(*corev1.Pod) {})
	// Required node affinity.
	add("nodeaffinity", 4, 4, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: diskLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
	})
	// Required anti-affinity by hostname, two replicas more than untainted nodes: two stay pending.
	add("anti", untainted+2, untainted, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel("anti"), TopologyKey: "kubernetes.io/hostname"}}}}
	})
	// Required anti-affinity by zone (zones span shards): one per zone, two stay pending.
	add("zoneanti", 5, 3, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel("zoneanti"), TopologyKey: zoneLabel}}}}
	})
	// A target pod in zone-c, and followers with required pod affinity to its zone.
	add("target", 1, 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "zone-c"} })
	add("follower", 5, 5, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel("target"), TopologyKey: zoneLabel}}}}
	})
	// Topology spread over zones, maxSkew 1, DoNotSchedule.
	add("spread", 11, 11, func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneLabel,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel("spread")}}
	})
	add("impossible", 1, 0, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "nowhere"} })
	return pods, want
}

// feasibility checks every bound pod of ns against the final state: node selector, required
// node affinity, taints, required pod affinity/anti-affinity and DoNotSchedule spread. It
// evaluates the constraints itself (no scheduler code).
func feasibility(nodes []corev1.Node, all []corev1.Pod, ns string) []string {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var pods []corev1.Pod
	for _, p := range all {
		if p.Namespace == ns && p.Spec.NodeName != "" {
			pods = append(pods, p)
		}
	}
	var bad []string
	errf := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	domain := func(node, key string) (string, bool) {
		n := byName[node]
		if n == nil {
			return "", false
		}
		v, ok := n.Labels[key]
		return v, ok
	}
	matching := func(s *metav1.LabelSelector) []corev1.Pod {
		sl, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			errf("selector %v: %v", s, err)
			return nil
		}
		var out []corev1.Pod
		for _, q := range pods {
			if sl.Matches(labels.Set(q.Labels)) {
				out = append(out, q)
			}
		}
		return out
	}
	for _, p := range pods {
		n := byName[p.Spec.NodeName]
		if n == nil {
			errf("%s on unknown node %s", p.Name, p.Spec.NodeName)
			continue
		}
		for k, v := range p.Spec.NodeSelector {
			if n.Labels[k] != v {
				errf("%s: nodeSelector %s=%s, node %s has %q", p.Name, k, v, n.Name, n.Labels[k])
			}
		}
		for _, t := range n.Spec.Taints {
			if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
				continue
			}
			if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
				errf("%s on %s does not tolerate taint %s", p.Name, n.Name, t.ToString())
			}
		}
		a := p.Spec.Affinity
		if a == nil {
			a = &corev1.Affinity{}
		}
		if na := a.NodeAffinity; na != nil && na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			if !nodeMatchesTerms(n, na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) {
				errf("%s on %s: required node affinity not met (labels %v)", p.Name, n.Name, n.Labels)
			}
		}
		if pa := a.PodAffinity; pa != nil {
			for _, term := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
				d, _ := domain(p.Spec.NodeName, term.TopologyKey)
				if !slices.ContainsFunc(matching(term.LabelSelector), func(q corev1.Pod) bool {
					qd, ok := domain(q.Spec.NodeName, term.TopologyKey)
					return q.Name != p.Name && ok && qd == d
				}) {
					errf("%s on %s: no pod matching %v in its %s %q", p.Name, n.Name, term.LabelSelector.MatchLabels, term.TopologyKey, d)
				}
			}
		}
		if aa := a.PodAntiAffinity; aa != nil {
			for _, term := range aa.RequiredDuringSchedulingIgnoredDuringExecution {
				d, _ := domain(p.Spec.NodeName, term.TopologyKey)
				for _, q := range matching(term.LabelSelector) {
					if qd, ok := domain(q.Spec.NodeName, term.TopologyKey); q.Name != p.Name && ok && qd == d {
						errf("%s and %s share %s %q against required anti-affinity", p.Name, q.Name, term.TopologyKey, d)
					}
				}
			}
		}
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				continue
			}
			// Domains: every value of the key on the nodes (default nodeAffinityPolicy Honor:
			// the pod has no node selector/affinity here; nodeTaintsPolicy Ignore).
			count := map[string]int{}
			for _, nd := range nodes {
				if v, ok := nd.Labels[c.TopologyKey]; ok {
					count[v] += 0
				}
			}
			for _, q := range matching(c.LabelSelector) {
				if v, ok := domain(q.Spec.NodeName, c.TopologyKey); ok {
					count[v]++
				}
			}
			lo, hi := -1, 0
			for _, k := range count {
				if lo < 0 || k < lo {
					lo = k
				}
				hi = max(hi, k)
			}
			if int32(hi-lo) > c.MaxSkew {
				errf("%s: spread over %s is %v, skew %d > %d", p.Name, c.TopologyKey, count, hi-lo, c.MaxSkew)
				break
			}
		}
	}
	sort.Strings(bad)
	return slices.Compact(bad)
}

// tolerates: the toleration matches the taint's key (an empty key with Exists matches every
// key), value (operator Equal, the default) and effect (empty matches every effect).
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != t.Key && !(tol.Key == "" && tol.Operator == corev1.TolerationOpExists) {
		return false
	}
	return tol.Operator == corev1.TolerationOpExists || tol.Value == t.Value
}

func nodeMatchesTerms(n *corev1.Node, terms []corev1.NodeSelectorTerm) bool {
	for _, t := range terms {
		ok := true
		for _, r := range t.MatchExpressions {
			v, has := n.Labels[r.Key]
			switch r.Operator {
			case corev1.NodeSelectorOpIn:
				ok = ok && has && slices.Contains(r.Values, v)
			case corev1.NodeSelectorOpNotIn:
				ok = ok && !(has && slices.Contains(r.Values, v))
			case corev1.NodeSelectorOpExists:
				ok = ok && has
			case corev1.NodeSelectorOpDoesNotExist:
				ok = ok && !has
			default:
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// boundByKind counts bound pods of ns per "kind" label.
func boundByKind(pods []corev1.Pod, ns string) map[string]int {
	out := map[string]int{}
	for _, p := range pods {
		if p.Namespace == ns && p.Spec.NodeName != "" {
			out[p.Labels["kind"]]++
		}
	}
	return out
}

func TestConstraintsLikeStockScheduler(t *testing.T) {
	bd := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: filepath.Join(t.TempDir(), "cluster"), Store: cluster.StoreMeganode,
		StoreShards: 1, Nodes: cmpNodes, BinDir: bd})
	if st != nil {
		defer func() {
			if t.Failed() {
				for _, c := range st.Components {
					if c.Kind == cluster.BinScheduler {
						b, _ := os.ReadFile(c.Log)
						s := string(b)
						if len(s) > 3000 {
							s = s[len(s)-3000:]
						}
						t.Logf("--- %s:\n%s", c.Log, s)
					}
				}
			}
			_ = st.Down(10*time.Second, nil)
		}()
	}
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Logf("up with %d nodes and the stock kube-scheduler in %.1fs", cmpNodes, time.Since(began).Seconds())
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}

	// Nodes: zones a/b/c come with `up` (node i in zones[i%3]). Nodes 1 and 8 (zones b and c) get
	// the dedicated taint and label, nodes 2, 6 and 10 (zones c, a, b) the ssd label.
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nl.Items) != cmpNodes {
		t.Fatalf("%d nodes, want %d", len(nl.Items), cmpNodes)
	}
	sort.Slice(nl.Items, func(i, j int) bool { return nl.Items[i].Name < nl.Items[j].Name })
	shardsOfZone := map[string]map[int]bool{}
	for i, n := range nl.Items {
		lbl := map[string]string{}
		taint := i == 1 || i == 8
		if taint {
			lbl[dedicated] = "true"
		}
		if i%4 == 2 {
			lbl[diskLabel] = "ssd"
		}
		if len(lbl) > 0 {
			patchLabels(t, ctx, cs, n.Name, lbl)
		}
		if taint {
			addTaint(t, ctx, cs, n.Name, corev1.Taint{Key: dedicated, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		}
		z := n.Labels[zoneLabel]
		if shardsOfZone[z] == nil {
			shardsOfZone[z] = map[int]bool{}
		}
		shardsOfZone[z][wire.Owner(n.Name, wire.AllShards(shards))] = true
	}
	for z, s := range shardsOfZone {
		if len(s) < 2 {
			t.Fatalf("zone %s lies in one meganode shard only (%v): the test wants zones spanning shards", z, s)
		}
	}
	untainted := cmpNodes - 2

	// The meganode scheduler, in process, 3 shards, global view on (the default;
	// MEGANODE_GLOBAL_VIEW=off shows what the shard-only view does with this input).
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	if _, err := msched.StartAll(sctx, msched.Config{Kubeconfig: st.Kubeconfig, SchedulerName: podspec.DefaultSchedulerName,
		Shards: shards, DeadAfter: -1, GlobalView: os.Getenv("MEGANODE_GLOBAL_VIEW")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // both schedulers' informers see the labels and taints

	type run struct{ ns, sched string }
	runs := []run{{"cmp-stock", corev1.DefaultSchedulerName}, {"cmp-meganode", podspec.DefaultSchedulerName}}
	var want map[string]int
	var pods0 []*corev1.Pod
	var mu sync.Mutex
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, r := range runs {
		if err := cluster.EnsureNamespace(ctx, cs, r.ns); err != nil {
			t.Fatal(err)
		}
		pods, w := constrainedWorkload(r.ns, r.sched, untainted)
		pods0 = pods
		mu.Lock()
		want = w
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			create(t, ctx, cs, pods) // a burst: 32 creates in flight
		}()
	}
	wg.Wait()
	total := 0
	for _, k := range want {
		total += k
	}

	t.Logf("created 2×%d pods in %.1fs", len(pods0), time.Since(t0).Seconds())
	// Wait until both namespaces have every schedulable pod bound, then a little longer.
	var pods []corev1.Pod
	for {
		pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = pl.Items
		done := true
		for _, r := range runs {
			n := 0
			for _, k := range boundByKind(pods, r.ns) {
				n += k
			}
			done = done && n >= total
		}
		if done || time.Since(t0) > 60*time.Second {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("all schedulable pods bound %.1fs after the first create", time.Since(t0).Seconds())
	time.Sleep(3 * time.Second) // a wrongful extra bind (a pending pod placed) would land now
	pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nl, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int{}
	for _, r := range runs {
		for _, v := range feasibility(nl.Items, pl.Items, r.ns) {
			t.Errorf("%s: infeasible placement: %s", r.sched, v)
		}
		got[r.sched] = boundByKind(pl.Items, r.ns)
		if !mapsEqual(got[r.sched], want) {
			t.Errorf("%s: bound per kind %v, want %v", r.sched, got[r.sched], want)
		}
		t.Logf("%s: bound per kind %v; per zone of spread pods %v", r.sched, got[r.sched], spreadPerZone(nl.Items, pl.Items, r.ns))
	}
	if !mapsEqual(got[runs[0].sched], got[runs[1].sched]) {
		t.Errorf("schedulable pods differ: stock %v, meganode %v", got[runs[0].sched], got[runs[1].sched])
	}
	checkNoOvercommit(t, ctx, cs)
	var global, ghosts int64
	for i := range shards {
		global += metrics.Counter(fmt.Sprintf("shard/%d", i), "global_evaluated")
		ghosts += metrics.Counter(fmt.Sprintf("shard/%d", i), "ghosts")
	}
	t.Logf("meganode: %d evaluations on the global view, %d attempts parked behind their constraint group, "+
		"%d placements taken from frames before the informer had them", global, metrics.Counter("intake/0", "parked"), ghosts)
}

func mapsEqual(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func spreadPerZone(nodes []corev1.Node, pods []corev1.Pod, ns string) map[string]int {
	zone := map[string]string{}
	for _, n := range nodes {
		zone[n.Name] = n.Labels[zoneLabel]
	}
	out := map[string]int{}
	for _, p := range pods {
		if p.Namespace == ns && p.Spec.NodeName != "" && p.Labels["kind"] == "spread" {
			out[zone[p.Spec.NodeName]]++
		}
	}
	return out
}

func patchLabels(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, lbl map[string]string) {
	t.Helper()
	var kv []string
	for k, v := range lbl {
		kv = append(kv, fmt.Sprintf("%q:%q", k, v))
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%s}}}`, strings.Join(kv, ","))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label %s: %v", node, err)
	}
}

func addTaint(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, taint corev1.Taint) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cur, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Taints = append(cur.Spec.Taints, taint)
		if _, err = cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return
		} else if attempt == 10 {
			t.Fatalf("taint %s: %v", node, err)
		}
	}
}
