package shard

import (
	"testing"

	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

func TestPerNodeMetricsDisabled(t *testing.T) {
	registerSchedulerMetrics()
	if schedmetrics.PluginEvaluationTotal.IsCreated() {
		t.Fatal("scheduler_plugin_evaluation_total is registered: every plugin call on every node would increment it")
	}
	if !schedmetrics.Goroutines.IsCreated() {
		t.Fatal("scheduler_goroutines is not registered: the other kube-scheduler metrics must stay")
	}
}
