package sim

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/shard"
)

// TopFraction is the top of kube-scheduler's ranking a placement is checked against (5 %).
const TopFraction = 0.05

// RankSummary is where a sample of a run's placements stands in kube-scheduler's own scoring
// (shard.Ranker: the same default plugins, one framework over every node), each pod ranked in
// the state of the pods bound before it.
type RankSummary struct {
	Sample int `json:"sample"` // pods ranked
	// InTop: placed on a node with fewer than TopFraction of the feasible nodes scored strictly
	// above it; TopShare = InTop / Sample.
	InTop    int     `json:"in_top"`
	TopShare float64 `json:"top_share"`
	// KubeTopShare is the same share for kube-scheduler's own pick in the same states (the
	// best of its percentageOfNodesToScore sample from a random start): what the stock sampling
	// rule itself achieves against its full ranking.
	KubeTopShare float64 `json:"kube_top_share"`
	// MeanHigherFraction: the mean share of feasible nodes scored strictly above the placement.
	MeanHigherFraction float64 `json:"mean_higher_fraction"`
	// NotFeasible: sampled pods whose node was not feasible in the replayed state (a pod bound
	// after it reserved the room first: the replay orders pods by Binding, the run by Reserve).
	NotFeasible int `json:"not_feasible"`
	// Constrained: the sampled pods with topology spread or pod anti-affinity, and their share in the top.
	Constrained         int     `json:"constrained"`
	ConstrainedTopShare float64 `json:"constrained_top_share"`
	Seconds             float64 `json:"seconds"`
}

// rankPlacements replays the run's Bindings in order into a shard.Ranker over the run's nodes
// and ranks sc.RankSample pods spread evenly over that order.
func rankPlacements(ctx context.Context, sc Config, binds []fakeapi.Bind) (*RankSummary, error) {
	t0 := time.Now()
	nodes := make([]*corev1.Node, sc.Nodes)
	for i := range nodes {
		nodes[i] = workloadNode(sc.Workload, i)
	}
	sc.Progress.Phase(fmt.Sprintf("ranking %d placements by kube-scheduler's scoring over all %d nodes", sc.RankSample, sc.Nodes))
	rk, err := shard.NewRanker(ctx, nodes, 16, 1)
	if err != nil {
		return nil, err
	}
	nodes = nil
	n := min(sc.RankSample, len(binds))
	sum := &RankSummary{}
	if n == 0 {
		return sum, nil
	}
	step := float64(len(binds)) / float64(n)
	next, ranked := 0, 0
	var higher, kubeTop, constrainedTop float64
	var done atomic.Int64
	sc.Progress.Start("ranking placements", int64(n), 0, done.Load)
	defer sc.Progress.Done()
	for k, b := range binds {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		i := podIndex(b.Pod)
		if i < 0 {
			return nil, fmt.Errorf("ranking: unknown pod %q", b.Pod)
		}
		pod := workloadPod(sc.Workload, i)
		if ranked < n && k == next {
			r, err := rk.Rank(ctx, pod, b.Node)
			if err != nil {
				return nil, err
			}
			ranked++
			done.Store(int64(ranked))
			next = int(math.Round(float64(ranked) * step))
			sum.Sample++
			_, constrained := mixedConstrained(i)
			if sc.Workload != WorkloadMixed {
				constrained = false
			}
			if constrained {
				sum.Constrained++
			}
			if r.Higher < 0 || r.Feasible == 0 {
				sum.NotFeasible++
			} else {
				frac := float64(r.Higher) / float64(r.Feasible)
				higher += frac
				if frac < TopFraction {
					sum.InTop++
					if constrained {
						constrainedTop++
					}
				}
			}
			if r.Feasible > 0 && r.KubeHigher >= 0 && float64(r.KubeHigher)/float64(r.Feasible) < TopFraction {
				kubeTop++
			}
		}
		if ranked >= n {
			break
		}
		if err := rk.Place(pod, b.Node); err != nil {
			return nil, err
		}
	}
	sum.TopShare = float64(sum.InTop) / float64(sum.Sample)
	sum.KubeTopShare = kubeTop / float64(sum.Sample)
	if m := sum.Sample - sum.NotFeasible; m > 0 {
		sum.MeanHigherFraction = higher / float64(m)
	}
	if sum.Constrained > 0 {
		sum.ConstrainedTopShare = constrainedTop / float64(sum.Constrained)
	}
	sum.Seconds = time.Since(t0).Seconds()
	return sum, nil
}

// checkPlacements counts the nodes whose bound pods request more than they have (CPU, memory,
// pods), and the largest zone skew of a topology-spread group of the mixed workload.
func checkPlacements(workload string, nodes int, binds []fakeapi.Bind) (overcommitted, spreadSkew int) {
	type use struct{ cpu, mem, pods int64 }
	used := map[int]*use{}
	groupZones := map[int]map[string]int{}
	nodeIdx := func(name string) int {
		var i int
		if _, err := fmt.Sscanf(name, "sim-node-%d", &i); err != nil {
			return -1
		}
		return i
	}
	for _, b := range binds {
		i, j := podIndex(b.Pod), nodeIdx(b.Node)
		if i < 0 || j < 0 || j >= nodes {
			overcommitted++ // a Binding to no node of the run
			continue
		}
		req := workloadPod(workload, i).Spec.Containers[0].Resources.Requests
		u := used[j]
		if u == nil {
			u = &use{}
			used[j] = u
		}
		u.cpu += req.Cpu().MilliValue()
		u.mem += req.Memory().Value()
		u.pods++
		if g, ok := mixedConstrained(i); ok && workload == WorkloadMixed && g%2 == 0 {
			if groupZones[g] == nil {
				groupZones[g] = map[string]int{}
			}
			groupZones[g][workloadNode(workload, j).Labels[zoneKey]]++
		}
	}
	for j, u := range used {
		a := workloadNode(workload, j).Status.Allocatable
		if u.cpu > a.Cpu().MilliValue() || u.mem > a.Memory().Value() || u.pods > a.Pods().Value() {
			overcommitted++
		}
	}
	for _, zs := range groupZones {
		lo, hi := math.MaxInt, 0
		for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
			lo, hi = min(lo, zs[z]), max(hi, zs[z])
		}
		spreadSkew = max(spreadSkew, hi-lo)
	}
	return overcommitted, spreadSkew
}
