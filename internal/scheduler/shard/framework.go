package shard

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// newFramework builds one kube-scheduler profile exactly as kube-scheduler v1.36.3 defaults it
// (KubeSchedulerConfiguration v1 defaults: every default plugin, default weights), renamed to
// schedulerName, over the given shard snapshot. Nothing in the framework is modified.
//
// Why the shard slice is a filtered snapshot and not a PreFilter/Filter plugin: the framework
// only ever sees nodes through the snapshot (fwk.SharedLister). Feeding the cache only the
// nodes this shard owns (and the pods bound to them) means foreign nodes cost nothing at all —
// no per-node Filter call, no NodeInfo, no snapshot update — and a shard's memory and CPU
// scale with N/S rather than N. A PreFilter plugin returning PreFilterResult.NodeNames would
// give the same placements but still keep all N nodes in every shard's cache and rebuild the
// subset per pod; a rejecting Filter plugin would still visit all N nodes per pod. The cost of
// the choice: plugins that look across nodes (InterPodAffinity, PodTopologySpread) would see
// only this shard's pods. Pods that depend on them — pod affinity/anti-affinity, explicit
// topology spread, or any pod while some pod has required anti-affinity — therefore run on a
// second instance built by newFrameworkSharing over the shard's global view (every node and
// bound pod; global_view.go), with Filter and Score still limited to this shard's nodes. The
// default profile's system-default spread constraints (soft, ScheduleAnyway) stay on this
// shard-only snapshot: their scores are approximate across shards.
func newFramework(ctx context.Context, cs kubernetes.Interface, factory informers.SharedInformerFactory,
	snapshot *internalcache.Snapshot, schedCache internalcache.Cache, schedulerName string, parallelism int) (framework.Framework, error) {
	return newFrameworkSharing(ctx, cs, factory, snapshot, schedCache, schedulerName, parallelism, nil)
}

// newFrameworkSharing is newFramework; with base != nil the new instance shares base's DRA and
// CSI managers instead of starting its own (the global view's second framework, global_view.go).
func newFrameworkSharing(ctx context.Context, cs kubernetes.Interface, factory informers.SharedInformerFactory,
	snapshot *internalcache.Snapshot, schedCache internalcache.Cache, schedulerName string, parallelism int,
	base framework.Framework) (framework.Framework, error) {
	var versioned configv1.KubeSchedulerConfiguration
	scheme.Scheme.Default(&versioned)
	var cfg config.KubeSchedulerConfiguration
	if err := scheme.Scheme.Convert(&versioned, &cfg, nil); err != nil {
		return nil, err
	}
	if len(cfg.Profiles) == 0 {
		return nil, fmt.Errorf("no default profile")
	}
	registerSchedulerMetrics() // the framework and the cache record into kube-scheduler's metrics
	prof := cfg.Profiles[0]
	prof.SchedulerName = schedulerName
	logger := klog.FromContext(ctx)

	var dra fwk.SharedDRAManager
	var csi fwk.CSIManager
	if base != nil {
		dra, csi = base.SharedDRAManager(), base.SharedCSIManager()
	} else {
		csi = nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())
	}
	if base == nil && utilfeature.DefaultFeatureGate.Enabled(features.DynamicResourceAllocation) {
		claims := assumecache.NewAssumeCache(logger, factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
		slices, err := tracker.StartTracker(ctx, tracker.Options{SliceInformer: factory.Resource().V1().ResourceSlices(), KubeClient: cs})
		if err != nil {
			return nil, err
		}
		dra = dynamicresources.NewDRAManager(ctx, claims, slices, factory)
	}
	fw, err := frameworkruntime.NewFramework(ctx, frameworkplugins.NewInTreeRegistry(), &prof,
		frameworkruntime.WithClientSet(cs),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithSharedCSIManager(csi),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithEventRecorder(events.NewFakeRecorder(0)),
		frameworkruntime.WithParallelism(max(parallelism, 1)),
		frameworkruntime.WithMetricsRecorder(metrics.NewMetricsAsyncRecorder(1000, 1e9, ctx.Done())),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithPodGroupManager(schedCache),
		frameworkruntime.WithLogger(logger),
	)
	if err != nil {
		return nil, err
	}
	// A placeholder: New installs the shard's nominator (nominator.go), which holds the pods
	// a cross-shard preemption nominated (preempt.go). The framework's own PostFilter
	// (DefaultPreemption) is never run: it would evict in each shard before the shards' candidates
	// were compared; preempt.go drives the plugin's dry run and victim selection instead.
	fw.SetPodNominator(noNominator{})
	return fw, nil
}

type noNominator struct{}

func (noNominator) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominator) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (noNominator) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (noNominator) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }
