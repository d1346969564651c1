package shard

import (
	"sync"

	componentmetrics "k8s.io/component-base/metrics"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// perNodeMetrics are kube-scheduler metrics a shard leaves disabled. The framework wraps every
// PreFilter, Filter, PreScore and Score plugin so that each call increments
// scheduler_plugin_evaluation_total: one atomic add per node per plugin (≈ 8,700 for a pod
// scored on 1,250 nodes), on a counter every goroutine of the process shares, since the labels
// (plugin, extension point, profile) are the same for every shard and every parallel pod. On
// two cores with 16 shards (the simulator) the cache line bounces between them: 7 % of the
// run's CPU in `counter.Inc` (docs/bench/scheduler-sim/, profile of 2026-11-25), and the same
// happens between the K pods one shard evaluates at once. kube-scheduler offers the same switch
// as --disabled-metrics. What the metric told is in the shard's own counters
// (filter_nodes, evaluated, filter_reused).
var perNodeMetrics = []string{"scheduler_plugin_evaluation_total"}

var registerKubeMetrics sync.Once

// registerSchedulerMetrics registers kube-scheduler's metrics, which the framework and the cache
// record into, with the per-node ones disabled (they must be disabled before registration).
func registerSchedulerMetrics() {
	registerKubeMetrics.Do(func() {
		componentmetrics.SetDisabledMetrics(perNodeMetrics)
		schedmetrics.Register()
	})
}
