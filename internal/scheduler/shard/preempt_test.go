package shard

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

func victimsOf(pods ...*corev1.Pod) *extenderv1.Victims { return &extenderv1.Victims{Pods: pods} }

func TestPreemptionCostOrder(t *testing.T) {
	base := wire.PreemptionCost{PDBViolations: 1, HighestPriority: 50, SumPriorities: 100, Victims: 2, EarliestStart: 1000}
	cheaper := []struct {
		name string
		c    wire.PreemptionCost
	}{
		{"fewer PDB violations beat everything else", wire.PreemptionCost{PDBViolations: 0, HighestPriority: 900, SumPriorities: 9000, Victims: 9, EarliestStart: 1}},
		{"lower highest priority", wire.PreemptionCost{PDBViolations: 1, HighestPriority: 40, SumPriorities: 9000, Victims: 9, EarliestStart: 1}},
		{"smaller sum", wire.PreemptionCost{PDBViolations: 1, HighestPriority: 50, SumPriorities: 99, Victims: 9, EarliestStart: 1}},
		{"fewer victims", wire.PreemptionCost{PDBViolations: 1, HighestPriority: 50, SumPriorities: 100, Victims: 1, EarliestStart: 1}},
		{"later start", wire.PreemptionCost{PDBViolations: 1, HighestPriority: 50, SumPriorities: 100, Victims: 2, EarliestStart: 2000}},
	}
	for _, tc := range cheaper {
		if tc.c.Compare(base) >= 0 || base.Compare(tc.c) <= 0 {
			t.Errorf("%s: %+v should be cheaper than %+v", tc.name, tc.c, base)
		}
	}
	if base.Compare(base) != 0 {
		t.Error("a cost does not tie with itself")
	}
	// The sum shifts each priority by 2^31 (as kube-scheduler does): one victim of priority -10
	// is cheaper than two of priority -10.
	one := priorityPod("a", -10)
	two := []*corev1.Pod{priorityPod("b", -10), priorityPod("c", -10)}
	c1 := preemptionCost(victimsOf(one))
	c2 := preemptionCost(victimsOf(two...))
	if c1.Compare(c2) >= 0 || c1.SumPriorities != int64(-10)+math.MaxInt32+1 {
		t.Errorf("one negative-priority victim %+v not cheaper than two %+v", c1, c2)
	}
}

func priorityPod(name string, prio int32) *corev1.Pod {
	p := fakeapi.Pod("default", name, podspec.DefaultSchedulerName, 100, 64)
	p.Spec.Priority = &prio
	return p
}
