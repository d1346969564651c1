package shard

import (
	"context"
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
)

// Ranker is kube-scheduler's own scoring over a whole cluster — one framework of the default
// profile (the shards' plugins and weights, newFramework) over one cache holding every node —
// used to judge where a sharded run placed its pods: replay the run's Bindings in order with
// Place, and before placing a sampled pod ask Rank where its node stands among all nodes.
// It is a yardstick, not a scheduler: nothing is reserved, bound or sent.
type Ranker struct {
	logger   klog.Logger
	cache    internalcache.Cache
	snapshot *internalcache.Snapshot
	fw       framework.Framework
	rng      *rand.Rand
}

// NewRanker builds the framework over nodes (Parallelism parallelism; ctx stops it).
func NewRanker(ctx context.Context, nodes []*corev1.Node, parallelism int, seed uint64) (*Ranker, error) {
	cs := fakeapi.NewClient()
	factory := informers.NewSharedInformerFactory(cs, 0)
	r := &Ranker{logger: klog.FromContext(ctx), cache: internalcache.New(ctx, nil, false), snapshot: internalcache.NewEmptySnapshot(),
		rng: rand.New(rand.NewPCG(seed, 37))}
	registerSchedulerMetrics()
	fw, err := newFramework(ctx, cs, factory, r.snapshot, r.cache, podspec.DefaultSchedulerName, parallelism)
	if err != nil {
		return nil, fmt.Errorf("ranker: framework: %w", err)
	}
	r.fw = fw
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	for _, n := range nodes {
		r.cache.AddNode(r.logger, n)
	}
	return r, nil
}

// Place adds pod as bound to node (the pod is modified: its spec.nodeName is set).
func (r *Ranker) Place(pod *corev1.Pod, node string) error {
	pod.Spec.NodeName = node
	return r.cache.AddPod(r.logger, pod)
}

// Rank is where one placement stands in kube-scheduler's scoring of every node.
type Rank struct {
	Nodes    int `json:"nodes"`    // nodes in the cluster
	Feasible int `json:"feasible"` // nodes the pod fits on (Filter over every node)
	// Higher: feasible nodes scored strictly above the node the pod was placed on (-1: that node
	// was not feasible in this state).
	Higher int `json:"higher"`
	// KubeHigher is Higher for kube-scheduler's own pick in this state: the best-scored node of
	// its sample (percentageOfNodesToScore's adaptive count of feasible nodes, FeasibleLimit,
	// walking from a random node), so a placement's rank can be set beside what the stock
	// scheduler's sampling itself achieves.
	KubeHigher int `json:"kube_higher"`
}

// Rank runs PreFilter and Filter over every node, PreScore and Score over every feasible one,
// for pod (not yet placed) in the state of the pods placed so far, and counts the feasible nodes
// scored strictly above node and above kube-scheduler's own sampled pick.
func (r *Ranker) Rank(ctx context.Context, pod *corev1.Pod, node string) (Rank, error) {
	if err := r.cache.UpdateSnapshot(r.logger, r.snapshot); err != nil {
		return Rank{}, err
	}
	all, err := r.snapshot.NodeInfos().List()
	if err != nil {
		return Rank{}, err
	}
	out := Rank{Nodes: len(all), Higher: -1, KubeHigher: -1}
	state := framework.NewCycleState()
	preRes, st, _ := r.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		return out, nil // fits nowhere in this state
	}
	ok := make([]bool, len(all))
	r.fw.Parallelizer().Until(ctx, len(all), func(i int) {
		if preRes != nil && !preRes.AllNodes() && !preRes.NodeNames.Has(all[i].Node().Name) {
			return
		}
		ok[i] = r.fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, all[i]).IsSuccess()
	}, "Filter")
	var feasible []fwk.NodeInfo
	var order []int // index in all of each feasible node
	for i, n := range all {
		if ok[i] {
			feasible = append(feasible, n)
			order = append(order, i)
		}
	}
	out.Feasible = len(feasible)
	if len(feasible) == 0 {
		return out, nil
	}
	if st := r.fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() && !st.IsSkip() {
		return out, fmt.Errorf("ranker: prescore: %s", st.Message())
	}
	scores, st := r.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return out, fmt.Errorf("ranker: score: %s", st.Message())
	}
	higher := func(total int64) int {
		n := 0
		for _, s := range scores {
			if s.TotalScore > total {
				n++
			}
		}
		return n
	}
	for _, s := range scores {
		if s.Name == node {
			out.Higher = higher(s.TotalScore)
			break
		}
	}
	// kube-scheduler's pick: the first FeasibleLimit feasible nodes from a random start in node
	// order, best total among them.
	limit := FeasibleLimit(FeasibleAuto, len(all))
	if limit <= 0 || limit > len(feasible) {
		limit = len(feasible)
	}
	start := r.rng.IntN(len(all))
	first := 0 // first feasible node at or after start (wrapping)
	for first < len(order) && order[first] < start {
		first++
	}
	best := int64(-1 << 62)
	for k := range limit {
		s := scores[(first+k)%len(scores)]
		best = max(best, s.TotalScore)
	}
	out.KubeHigher = higher(best)
	return out, nil
}
