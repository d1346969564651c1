// Package clusterbench is `meganode scheduler bench`: the stock kube-scheduler and the meganode
// scheduler, each on a fresh `up` cluster of KWOK nodes, timed on a drain of pre-created pods,
// paced creation latency and the apiserver's Binding ceiling, with placement quality. It runs
// the scheduler as a process and only borrows the scheduler's client settings (ClientFor).
package clusterbench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/procfs"
	"github.com/meganode/meganode/internal/scheduler"
)

// Options configure the scheduler benchmark on `up` clusters (a command, not a test).
type Options struct {
	Nodes, Pods  int
	Shards       []int // meganode runs; the stock kube-scheduler runs first unless NoStock
	NoStock      bool
	LatencyPods  int     // paced phase: pods created at LatencyQPS, creation → bound measured
	LatencyQPS   float64 // default 100
	StateDir     string
	BinDir       string
	SchedulerArg []string // extra meganode scheduler flags
	NodeLeaseSec int      // KWOK node lease duration (0 = 40 s); longer keeps lease writes from drowning the apiserver at 10K nodes
	ProfileDir   string   // meganode runs: a CPU profile of the scheduler (first ProfileSec of the drain) and its /metrics after it are written here
	ProfileSec   int      // default 15
	// Workload: WorkloadUniform ("" = uniform: every pod 100m CPU, 64Mi, on the default 8 CPU/32Gi
	// nodes) or WorkloadMixed (pods of 100m/1/4 CPU on nodes of 8 and 32 CPU: mixedPodClasses, mixedNodeSizes).
	Workload string
	// BindCeiling: after each row's drain and latency phases, measure the apiserver's bind ceiling
	// on the same cluster (bindCeiling).
	BindCeiling bool
	// BindCeilingWorkers: Bindings in flight in that phase (0 = 256, the meganode scheduler's --bind-workers default).
	BindCeilingWorkers int
	Progress           *bench.Progress `json:"-"`
}

// Workloads of the benchmark.
const (
	WorkloadUniform = "uniform"
	WorkloadMixed   = "mixed"
)

// podClass is one kind of pod of a workload: its requests and its share of the pods (in tenths).
type podClass struct {
	CPU, Memory string
	Tenths      int
}

// uniformPod is every pod of the uniform workload.
var uniformPod = podClass{CPU: "100m", Memory: "64Mi", Tenths: 10}

// mixedPodClasses: 70 % small, 20 % medium, 10 % large pods, interleaved by index (pod i is of
// the class of i mod 10) so every stretch of the queue holds all three.
var mixedPodClasses = []podClass{{"100m", "64Mi", 7}, {"1", "1Gi", 2}, {"4", "4Gi", 1}}

// mixedNodeSizes: node i alternates between today's 8 CPU/32Gi node and a 32 CPU/128Gi one, so
// half the nodes are each; with pods of three sizes, where a pod lands depends on scoring.
var mixedNodeSizes = []cluster.NodeSize{cluster.DefaultNodeSize, {CPU: "32", Memory: "128Gi", InstanceType: "m5.8xlarge"}}

// checkWorkload validates the workload name.
func checkWorkload(w string) error {
	switch w {
	case "", WorkloadUniform, WorkloadMixed:
		return nil
	}
	return fmt.Errorf("--workload: want %s or %s, got %q", WorkloadUniform, WorkloadMixed, w)
}

// workloadPodClass is the class of pod i of the workload.
func workloadPodClass(workload string, i int) podClass {
	if workload != WorkloadMixed {
		return uniformPod
	}
	k := ((i % 10) + 10) % 10
	for _, c := range mixedPodClasses {
		if k < c.Tenths {
			return c
		}
		k -= c.Tenths
	}
	return mixedPodClasses[len(mixedPodClasses)-1]
}

// WorkloadRequests are the requests of pod i of the workload.
func WorkloadRequests(workload string, i int) corev1.ResourceList {
	c := workloadPodClass(workload, i)
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c.CPU), corev1.ResourceMemory: resource.MustParse(c.Memory)}
}

// WorkloadNodeSizes are the node sizes of the workload for cluster.UpOptions.NodeSizes (nil: the default node).
func WorkloadNodeSizes(workload string) []cluster.NodeSize {
	if workload == WorkloadMixed {
		return mixedNodeSizes
	}
	return nil
}

// benchPod is pod i of the workload: cluster.PodObject (pause container, nodeSelector type=kwok)
// with the workload's requests.
func benchPod(workload, ns, name, run string, i int) *corev1.Pod {
	p := cluster.PodObject(ns, name, run)
	p.Spec.Containers[0].Resources.Requests = WorkloadRequests(workload, i)
	return p
}

// checkCapacity refuses a run whose drain and latency pods could not all fit on the nodes
// (CPU, memory or the 110 pods a node takes), which would leave the drain waiting forever.
func checkCapacity(workload string, nodes, pods int) error {
	var cpu, mem, capCPU, capMem int64
	for i := range pods {
		r := WorkloadRequests(workload, i)
		cpu += r.Cpu().MilliValue()
		mem += r.Memory().Value()
	}
	sizes := WorkloadNodeSizes(workload)
	for i := range nodes {
		n := cluster.NodeObjectSized("n", i, cluster.NodeSizeAt(sizes, i))
		capCPU += n.Status.Allocatable.Cpu().MilliValue()
		capMem += n.Status.Allocatable.Memory().Value()
	}
	switch {
	case pods > 110*nodes:
		return fmt.Errorf("%d pods do not fit on %d nodes of 110 pods each", pods, nodes)
	case cpu > capCPU:
		return fmt.Errorf("workload %s: %d pods request %dm CPU, %d nodes have %dm", workload, pods, cpu, nodes, capCPU)
	case mem > capMem:
		return fmt.Errorf("workload %s: %d pods request %d MiB, %d nodes have %d MiB", workload, pods, mem>>20, nodes, capMem>>20)
	}
	return nil
}

// Row is one scheduler's result.
type Row struct {
	Scheduler    string  `json:"scheduler"`
	Shards       int     `json:"shards,omitempty"`
	Pods         int     `json:"pods"`
	DrainSeconds float64 `json:"drain_seconds"` // pre-created pods: scheduler resumed → last bound
	PodsPerSec   float64 `json:"pods_per_sec"`
	CPUMsPerPod  float64 `json:"cpu_ms_per_pod"` // scheduler process CPU, resumed → every pod bound and its Scheduled event written, / pods
	// The drain's Scheduled events: how many were seen (watch from before the drain) and when the
	// last one came (resumed → last event). A scheduler may write them behind its Bindings, so the
	// drain's CPU is taken when they are written, not when the last pod is bound.
	EventsSeen       int     `json:"events_seen"`
	EventsSeconds    float64 `json:"events_seconds"`
	CPUMsPerPodBound float64 `json:"cpu_ms_per_pod_bound"` // the same CPU up to the last Binding only
	// The whole machine during the drain (resumed → last bound; /proc/stat, every process: the
	// apiserver, the store, KWOK, the controller manager, the scheduler, this bench): CPU per pod
	// and cores busy. When the drain keeps every core busy, pods/s = cores / machine CPU per pod.
	MachineCPUMsPerPod float64 `json:"machine_cpu_ms_per_pod"`
	MachineCoresBusy   float64 `json:"machine_cores_busy"`
	// The same CPU put on each process (ms per pod; "other" = the machine's rest), and each
	// process's cores busy in the idle seconds before the drain (pods created, scheduler paused):
	// the cluster's background load, which the drain's figures include.
	DrainCPUByProcess  map[string]float64 `json:"drain_cpu_ms_per_pod_by_process,omitempty"`
	IdleCoresByProcess map[string]float64 `json:"idle_cores_by_process,omitempty"`
	Latency            bench.Latency      `json:"latency"` // paced phase: creation → bound
	LatencyQPS         float64            `json:"latency_qps"`
	UtilMean           float64            `json:"util_mean"`   // mean over nodes of requested CPU / allocatable
	UtilStddev         float64            `json:"util_stddev"` // spread of that (lower = more even)
	UtilMax            float64            `json:"util_max"`
	EmptyNodes         int                `json:"empty_nodes"` // nodes without requested CPU
	Unscheduled        int                `json:"unscheduled"`
	// Placement by pod count, over every node, of the drained pods once the drain ended.
	PodsPerNodeMean   float64 `json:"pods_per_node_mean"`
	PodsPerNodeStddev float64 `json:"pods_per_node_stddev"`
	PodsPerNodeMax    int     `json:"pods_per_node_max"`
	EmptyNodesByPods  int     `json:"empty_nodes_by_pods"` // nodes without a drained pod
	// PodsPerNodeHist[k] is the number of nodes holding k drained pods: the shape behind the
	// stdev (clumps of 3 on a third of the nodes and as many empty nodes is not random spread).
	PodsPerNodeHist []int `json:"pods_per_node_hist"`
	// The apiserver's bind ceiling on this row's cluster (bindCeiling): Pods pre-decided Bindings
	// posted as fast as the scheduler's client allows, first Binding → last OK. OfCeiling =
	// PodsPerSec / BindCeilingPerSec.
	BindCeilingPerSec  float64 `json:"bind_ceiling_per_sec,omitempty"`
	BindCeilingSeconds float64 `json:"bind_ceiling_seconds,omitempty"`
	BindCeilingBinds   int     `json:"bind_ceiling_binds,omitempty"`  // Bindings that succeeded
	BindCeilingErrors  int     `json:"bind_ceiling_errors,omitempty"` // Bindings that failed (after retries)
	BindCeilingRetries int     `json:"bind_ceiling_retries,omitempty"`
	OfCeiling          float64 `json:"of_ceiling,omitempty"`
	// The whole machine during the Bindings-only ceiling: CPU per Binding, cores busy.
	CeilingMachineCPUMsPerPod float64            `json:"ceiling_machine_cpu_ms_per_pod,omitempty"`
	CeilingMachineCoresBusy   float64            `json:"ceiling_machine_cores_busy,omitempty"`
	CeilingCPUByProcess       map[string]float64 `json:"ceiling_cpu_ms_per_pod_by_process,omitempty"`
	EventCeilingCPUByProcess  map[string]float64 `json:"bind_event_ceiling_cpu_ms_per_pod_by_process,omitempty"`
	// The same with each Binding followed by the pod's Scheduled Event (events.k8s.io/v1, as
	// both schedulers write one per bound pod): the apiserver's ceiling for scheduled pods.
	// OfEventCeiling = PodsPerSec / BindEventCeilingPerSec.
	BindEventCeilingPerSec  float64 `json:"bind_event_ceiling_per_sec,omitempty"`
	BindEventCeilingSeconds float64 `json:"bind_event_ceiling_seconds,omitempty"`
	BindEventCeilingErrors  int     `json:"bind_event_ceiling_errors,omitempty"`
	OfEventCeiling          float64 `json:"of_event_ceiling,omitempty"`
	SchedulerName           string  `json:"-"`
}

const benchNS = "sched-bench"

// Run runs the stock scheduler and meganode with each shard count, one cluster each.
func Run(ctx context.Context, o Options) ([]Row, error) {
	if o.LatencyQPS <= 0 {
		o.LatencyQPS = 100
	}
	if err := checkWorkload(o.Workload); err != nil {
		return nil, err
	}
	if err := checkCapacity(o.Workload, o.Nodes, o.Pods+o.LatencyPods); err != nil {
		return nil, err
	}
	type run struct {
		kind   string
		shards int
	}
	var runs []run
	if !o.NoStock {
		runs = append(runs, run{cluster.SchedulerKube, 0})
	}
	for _, s := range o.Shards {
		runs = append(runs, run{cluster.SchedulerMeganode, s})
	}
	var rows []Row
	for _, r := range runs {
		row, err := benchOne(ctx, o, r.kind, r.shards)
		if err != nil {
			return rows, fmt.Errorf("%s (%d shards): %w", r.kind, r.shards, err)
		}
		rows = append(rows, *row)
	}
	return rows, nil
}

func benchOne(ctx context.Context, o Options, kind string, shards int) (*Row, error) {
	prog := o.Progress
	label := kind
	if kind == cluster.SchedulerMeganode {
		label = fmt.Sprintf("meganode/%d", shards)
	}
	prog.Printf("== %s: up with %d nodes", label, o.Nodes)
	// A fresh state directory per run: certificates and data never mix between clusters.
	dir := filepath.Join(o.StateDir, strings.ReplaceAll(label, "/", "-"))
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: dir, Nodes: o.Nodes, Pods: o.Pods, BinDir: o.BinDir,
		Scheduler: kind, SchedulerShards: shards, SchedulerArgs: o.SchedulerArg, NodeLeaseSeconds: o.NodeLeaseSec,
		NodeSizes: WorkloadNodeSizes(o.Workload)})
	if st != nil {
		defer func() { _ = st.Down(10*time.Second, nil) }()
	}
	if err != nil {
		return nil, err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return nil, err
	}
	if err := cluster.EnsureNamespace(ctx, cs, benchNS); err != nil {
		return nil, err
	}
	var sched *cluster.Component
	for i := range st.Components {
		if c := &st.Components[i]; c.Kind == cluster.BinScheduler || c.Kind == cluster.KindMeganodeScheduler {
			sched = c
		}
	}
	if sched == nil {
		return nil, fmt.Errorf("no scheduler component")
	}
	row := &Row{Scheduler: label, Shards: shards, Pods: o.Pods, LatencyQPS: o.LatencyQPS}

	// Phase 1, throughput: pause the scheduler (SIGSTOP), create every pod, resume, time the drain.
	if err := syscall.Kill(sched.Pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(sched.Pid, syscall.SIGCONT)
		}
	}()
	prog.Printf("   creating %d pods with the scheduler paused", o.Pods)
	if _, err := createBenchPods(ctx, cs, benchNS, o.Pods, func(i int) *corev1.Pod {
		return benchPod(o.Workload, benchNS, fmt.Sprintf("drain-%06d", i), "drain", i)
	}); err != nil {
		return nil, err
	}
	evs, err := watchScheduledEvents(ctx, cs)
	if err != nil {
		return nil, err
	}
	defer evs.stop()
	procs := clusterProcs(st)
	// The background: every process's CPU over a few idle seconds before the drain.
	const idleSec = 5
	idle0, idleMach0 := procs.cpu(), machineCPU()
	time.Sleep(idleSec * time.Second)
	row.IdleCoresByProcess = spent(idle0, procs.cpu(), machineCPU()-idleMach0, 1.0/idleSec)
	prog.Printf("   idle for %ds before the drain, cores busy by process: %s", idleSec, formatByProc(row.IdleCoresByProcess))
	procs0, mach0 := procs.cpu(), machineCPU()
	cpu0 := procs0[sched.Name]
	t0 := time.Now()
	_ = syscall.Kill(sched.Pid, syscall.SIGCONT)
	resumed = true
	profDone := make(chan struct{})
	if o.ProfileDir != "" && kind == cluster.SchedulerMeganode {
		go func() {
			defer close(profDone)
			if err := fetchProfile(ctx, sched.URL, o.ProfileSec, filepath.Join(o.ProfileDir, strings.ReplaceAll(label, "/", "-")+".pprof")); err != nil {
				prog.Printf("   profile: %v", err)
			}
		}()
	} else {
		close(profDone)
	}
	defer func() { <-profDone }()
	n, err := waitAllBound(ctx, cs, o.Pods, 10*time.Minute)
	el := time.Since(t0)
	procs1, mach := procs.cpu(), machineCPU()-mach0
	cpu := procs1[sched.Name] - cpu0
	row.DrainCPUByProcess = spent(procs0, procs1, mach, 1e3/float64(o.Pods))
	if err != nil {
		return nil, fmt.Errorf("drain: %d of %d bound: %w", n, o.Pods, err)
	}
	row.DrainSeconds, row.PodsPerSec, row.CPUMsPerPodBound = el.Seconds(), float64(o.Pods)/el.Seconds(), cpu*1e3/float64(o.Pods)
	row.MachineCPUMsPerPod, row.MachineCoresBusy = mach*1e3/float64(o.Pods), mach/el.Seconds()
	row.EventsSeen, row.EventsSeconds = evs.wait(ctx, o.Pods, 3*time.Minute, t0)
	row.CPUMsPerPod = (procCPU(sched.Pid) - cpu0) * 1e3 / float64(o.Pods)
	if row.EventsSeen < o.Pods {
		prog.Printf("   only %d of %d Scheduled events seen within 3 min of the last Binding", row.EventsSeen, o.Pods)
	}
	if o.ProfileDir != "" && kind == cluster.SchedulerMeganode {
		if err := saveURL(ctx, sched.URL+"/metrics", filepath.Join(o.ProfileDir, strings.ReplaceAll(label, "/", "-")+".metrics")); err != nil {
			prog.Printf("   metrics: %v", err)
		}
	}
	if err := utilisation(ctx, cs, row); err != nil {
		return nil, err
	}
	prog.Printf("   the drain's %d Scheduled events written by %.2fs; CPU to the last Binding %.2f ms/pod, to the last event %.2f ms/pod",
		row.EventsSeen, row.EventsSeconds, row.CPUMsPerPodBound, row.CPUMsPerPod)
	prog.Printf("   the machine during the drain: %.2f of %d cores busy, %.2f ms CPU per pod (every process)", row.MachineCoresBusy, runtime.NumCPU(), row.MachineCPUMsPerPod)
	prog.Printf("   the drain's CPU by process, ms per pod: %s", formatByProc(row.DrainCPUByProcess))
	prog.Printf("   drained %d pods in %.2fs = %.0f pods/s, %.2f ms CPU/pod, utilisation mean %.3f stddev %.4f max %.3f, %d empty nodes; pods/node stddev %.2f max %d",
		o.Pods, el.Seconds(), row.PodsPerSec, row.CPUMsPerPod, row.UtilMean, row.UtilStddev, row.UtilMax, row.EmptyNodes,
		row.PodsPerNodeStddev, row.PodsPerNodeMax)
	prog.Printf("   nodes by pods held (0, 1, 2, …): %v", row.PodsPerNodeHist)

	// Phase 2, latency: paced creation, creation → bound.
	if o.LatencyPods > 0 {
		r, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: benchNS + "-lat", Count: o.LatencyPods, QPS: o.LatencyQPS,
			Timeout: 5 * time.Minute, Requests: func(i int) corev1.ResourceList { return WorkloadRequests(o.Workload, i) }})
		if err != nil {
			return nil, fmt.Errorf("latency phase: %w", err)
		}
		row.Latency = r.Schedule
		prog.Printf("   latency at %.0f pods/s: p50 %.1f ms, p99 %.1f ms", o.LatencyQPS, r.Schedule.P50Us/1e3, r.Schedule.P99Us/1e3)
	}

	// Phase 3, the apiserver's bind ceiling on this cluster.
	if o.BindCeiling {
		prog.Printf("   bind ceiling: creating %d pods no scheduler serves, then posting their Bindings (%d in flight)",
			o.Pods, cmp.Or(o.BindCeilingWorkers, DefaultBindCeilingWorkers))
		c, err := bindCeiling(ctx, cs, filepath.Join(st.Dir, "scheduler.kubeconfig"), o, false, procs)
		if err != nil {
			return nil, fmt.Errorf("bind ceiling: %w", err)
		}
		row.BindCeilingPerSec, row.BindCeilingSeconds, row.BindCeilingBinds, row.BindCeilingErrors, row.BindCeilingRetries =
			c.PerSec, c.Seconds, c.Binds, c.Errors, c.Retries
		if c.PerSec > 0 {
			row.OfCeiling = row.PodsPerSec / c.PerSec
		}
		prog.Printf("   bind ceiling: %d Bindings in %.2fs = %.0f binds/s (%d failed, %d retried); the drain ran at %.0f%% of it",
			c.Binds, c.Seconds, c.PerSec, c.Errors, c.Retries, row.OfCeiling*100)
		prog.Printf("   bind ceiling: the machine %.2f cores busy, %.2f ms CPU per Binding (every process)", c.MachineCoresBusy, c.MachineCPUMsPerPod)
		prog.Printf("   bind ceiling: CPU by process, ms per Binding: %s", formatByProc(c.ByProcess))
		row.CeilingMachineCPUMsPerPod, row.CeilingMachineCoresBusy, row.CeilingCPUByProcess = c.MachineCPUMsPerPod, c.MachineCoresBusy, c.ByProcess
		prog.Printf("   bind+event ceiling: %d more pods, each Binding followed by its Scheduled Event", o.Pods)
		e, err := bindCeiling(ctx, cs, filepath.Join(st.Dir, "scheduler.kubeconfig"), o, true, procs)
		if err != nil {
			return nil, fmt.Errorf("bind+event ceiling: %w", err)
		}
		row.BindEventCeilingPerSec, row.BindEventCeilingSeconds, row.BindEventCeilingErrors = e.PerSec, e.Seconds, e.Errors
		if e.PerSec > 0 {
			row.OfEventCeiling = row.PodsPerSec / e.PerSec
		}
		prog.Printf("   bind+event ceiling: %d pods in %.2fs = %.0f pods/s (%d failed, %d retried); the drain ran at %.0f%% of it",
			e.Binds, e.Seconds, e.PerSec, e.Errors, e.Retries, row.OfEventCeiling*100)
		prog.Printf("   bind+event ceiling: the machine %.2f cores busy, %.2f ms CPU per pod to its last Binding (every process)", e.MachineCoresBusy, e.MachineCPUMsPerPod)
		prog.Printf("   bind+event ceiling: CPU by process, ms per pod: %s", formatByProc(e.ByProcess))
		row.EventCeilingCPUByProcess = e.ByProcess
	}
	return row, nil
}

// Bind ceiling settings: the pods' spec.schedulerName (served by no scheduler, so only the
// Bindings below place them), their namespace, and the Bindings in flight (the meganode
// scheduler's --bind-workers default).
const (
	CeilingSchedulerName      = "meganode-ceiling-nobody"
	ceilingNS                 = benchNS + "-ceiling"
	DefaultBindCeilingWorkers = 256
	ceilingClientQPS          = 5000 // the meganode scheduler's --kube-api-qps default (burst 2×)
)

// ceilingResult is what bindCeiling measured.
type ceilingResult struct {
	Binds, Errors, Retries int
	Seconds, PerSec        float64
	// The whole machine from the first Binding to the last (as MachineCPUMsPerPod for the drain).
	MachineCPUMsPerPod, MachineCoresBusy float64
	ByProcess                            map[string]float64 // the same by process (spent)
}

// bindCeiling measures how fast this cluster's apiserver takes Bindings: it creates o.Pods pods
// of the workload that no scheduler serves, decides their nodes up front (round-robin over the
// Ready nodes, skipping nodes the pod no longer fits by CPU, memory or pod count given what is
// already bound; if none fits, plain round-robin), and posts the Bindings (pods/binding, with the
// pod's UID as the framework's DefaultBinder does) from BindCeilingWorkers goroutines through
// the client the meganode scheduler uses: ClientFor (QPS 5000, burst 10000, protobuf) on the
// scheduler's kubeconfig, so the requests fall in the scheduler's API priority and fairness flow.
// The time runs from the first Binding sent to the last one answered OK.
//
// Without events it is a ceiling of the Binding path only; both schedulers also write one
// Scheduled Event per pod (and the stock scheduler patches status on failures), so with events
// each Binding that succeeded is followed by that Event (events.k8s.io/v1, the fields
// kube-scheduler's recorder fills), written on a goroutine of its own as client-go's events
// broadcaster writes each event (tools/events: one goroutine per event, so the events compete
// with the Bindings for the apiserver but do not hold a worker back). The time is, as for the
// drain, first Binding to last Binding; the phase then waits for the events to finish. Each
// phase uses pods of its own. The scheduler keeps running meanwhile (it ignores these pods, but
// its informers see them as the drain's did).
func bindCeiling(ctx context.Context, admin kubernetes.Interface, schedKubeconfig string, o Options, withEvents bool, procs procSet) (*ceilingResult, error) {
	workers := cmp.Or(o.BindCeilingWorkers, DefaultBindCeilingWorkers)
	if err := cluster.EnsureNamespace(ctx, admin, ceilingNS); err != nil {
		return nil, err
	}
	prefix := "ceiling"
	if withEvents {
		prefix = "ceiling-ev"
	}
	pods, err := createBenchPods(ctx, admin, ceilingNS, o.Pods, func(i int) *corev1.Pod {
		p := benchPod(o.Workload, ceilingNS, fmt.Sprintf("%s-%06d", prefix, i), prefix, i)
		p.Spec.SchedulerName = CeilingSchedulerName
		return p
	})
	if err != nil {
		return nil, err
	}
	nl, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pl, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	targets := assignRoundRobin(nl.Items, pl.Items, pods)
	if targets == nil {
		return nil, fmt.Errorf("no Ready node")
	}
	cs, err := scheduler.ClientFor(schedKubeconfig, ceilingClientQPS)
	if err != nil {
		return nil, err
	}
	var next, binds, errs, retries, evErrs atomic.Int64
	var evWG sync.WaitGroup // the events still being written
	var mu sync.Mutex
	var last time.Time
	var firstErr error
	var wg sync.WaitGroup
	mach0, procs0 := machineCPU(), procs.cpu()
	t0 := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var myLast time.Time
			for {
				i := int(next.Add(1) - 1)
				if i >= len(pods) {
					break
				}
				p := pods[i]
				b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
					Target: corev1.ObjectReference{Kind: "Node", Name: targets[i]}}
				var err error
				for attempt := range 5 {
					if err = cs.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err == nil {
						break
					}
					// Conflict: already bound (a retried request that had gone through); other errors
					// (429, timeouts) are retried like client-go's callers would after a short pause.
					if apierrors.IsConflict(err) || ctx.Err() != nil {
						break
					}
					retries.Add(1)
					time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
				}
				if err == nil && withEvents { // written on its own goroutine, as the events library does
					evWG.Add(1)
					go func() {
						defer evWG.Done()
						if postScheduledEvent(ctx, cs, p, targets[i]) != nil {
							evErrs.Add(1)
						}
					}()
				}
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				binds.Add(1)
				myLast = time.Now()
			}
			mu.Lock()
			if myLast.After(last) {
				last = myLast
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	mach, machEl := machineCPU()-mach0, time.Since(t0) // to the last Binding answered, as the time
	procs1 := procs.cpu()
	evWG.Wait() // the last events are written after the last Binding, as a scheduler's are
	r := &ceilingResult{Binds: int(binds.Load()), Errors: int(errs.Load()) + int(evErrs.Load()), Retries: int(retries.Load())}
	if r.Binds > 0 {
		r.Seconds = last.Sub(t0).Seconds()
		r.PerSec = float64(r.Binds) / r.Seconds
		r.MachineCPUMsPerPod, r.MachineCoresBusy = mach*1e3/float64(r.Binds), mach/machEl.Seconds()
		r.ByProcess = spent(procs0, procs1, mach, 1e3/float64(r.Binds))
	}
	if r.Binds == 0 && firstErr != nil {
		return r, firstErr
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	return r, nil
}

// postScheduledEvent writes the Normal/Scheduled event of pod p bound to node, as
// kube-scheduler's events.k8s.io/v1 recorder writes it (one Create; name <pod>.<hex nanos>).
// It does not go through the schedulers' recorder (package events): the broadcaster neither
// reports a failed write nor says when the last one is done, and the ceiling needs both.
func postScheduledEvent(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, node string) error {
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s.%x", p.Name, now.UnixNano())},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: CeilingSchedulerName,
		ReportingInstance:   CeilingSchedulerName + "-bench",
		Action:              "Binding",
		Reason:              "Scheduled",
		Regarding:           corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Note:                fmt.Sprintf("Successfully assigned %s/%s to %s", p.Namespace, p.Name, node),
		Type:                corev1.EventTypeNormal,
	}
	_, err := cs.EventsV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// assignRoundRobin decides a node for each pod: round-robin over the Ready nodes (in name order),
// moving on past nodes the pod does not fit (CPU, memory, pod count, counting the pods already
// bound and those assigned before it); a pod that fits nowhere takes the next node regardless
// (the apiserver does not check; only a scheduler would). nil without Ready nodes.
func assignRoundRobin(nodes []corev1.Node, bound []corev1.Pod, pods []*corev1.Pod) []string {
	type free struct {
		name          string
		cpu, mem, cnt int64
	}
	var fs []*free
	byName := map[string]*free{}
	for i := range nodes {
		n := &nodes[i]
		if !cluster.NodeSchedulable(n) {
			continue
		}
		a := n.Status.Allocatable
		f := &free{name: n.Name, cpu: a.Cpu().MilliValue(), mem: a.Memory().Value(), cnt: a.Pods().Value()}
		fs = append(fs, f)
		byName[n.Name] = f
	}
	if len(fs) == 0 {
		return nil
	}
	slices.SortFunc(fs, func(a, b *free) int { return strings.Compare(a.name, b.name) })
	for i := range bound {
		p := &bound[i]
		f := byName[p.Spec.NodeName]
		if f == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		cpu, mem := podRequests(p)
		f.cpu, f.mem, f.cnt = f.cpu-cpu, f.mem-mem, f.cnt-1
	}
	out := make([]string, len(pods))
	cursor := 0
	for i, p := range pods {
		cpu, mem := podRequests(p)
		pick := fs[cursor%len(fs)]
		for k := range len(fs) {
			if f := fs[(cursor+k)%len(fs)]; f.cpu >= cpu && f.mem >= mem && f.cnt >= 1 {
				pick, cursor = f, cursor+k
				break
			}
		}
		cursor++
		pick.cpu, pick.mem, pick.cnt = pick.cpu-cpu, pick.mem-mem, pick.cnt-1
		out[i] = pick.name
	}
	return out
}

// podRequests sums the CPU (milli) and memory (bytes) requests of the pod's containers.
func podRequests(p *corev1.Pod) (cpu, mem int64) {
	for _, c := range p.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	return cpu, mem
}

// createBenchPods creates pods mk(0) … mk(n-1) in ns from 32 goroutines and returns them as
// the apiserver stored them (with their UIDs), by index.
func createBenchPods(ctx context.Context, cs kubernetes.Interface, ns string, n int, mk func(i int) *corev1.Pod) ([]*corev1.Pod, error) {
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	next := make(chan int)
	out := make([]*corev1.Pod, n)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p, err := cs.CoreV1().Pods(ns).Create(ctx, mk(i), metav1.CreateOptions{})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				out[i] = p
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
		return out, nil
	}
}

// waitAllBound counts bound pods of benchNS from one LIST and then a watch, so the wait adds
// one list and a stream of events to the apiserver, not a 10K-pod LIST every poll (which on
// this 2-core machine took apiserver CPU from both schedulers).
func waitAllBound(ctx context.Context, cs kubernetes.Interface, want int, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bound := map[string]bool{}
	for ctx.Err() == nil {
		pl, err := cs.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		clear(bound)
		for _, p := range pl.Items {
			bound[p.Name] = p.Spec.NodeName != ""
		}
		if countTrue(bound) >= want {
			return countTrue(bound), nil
		}
		w, err := cs.CoreV1().Pods(benchNS).Watch(ctx, metav1.ListOptions{ResourceVersion: pl.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			continue
		}
		n := countTrue(bound)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			was := bound[p.Name]
			now := p.Spec.NodeName != "" && ev.Type != "DELETED"
			bound[p.Name] = now
			if now && !was {
				n++
			} else if was && !now {
				n--
			}
			if n >= want {
				w.Stop()
				return n, nil
			}
		}
		w.Stop() // the watch ended (timeout, expiry): list again
	}
	return countTrue(bound), fmt.Errorf("timeout")
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// utilisation lists the nodes and pods and fills the row's placement figures (placementStats).
func utilisation(ctx context.Context, cs kubernetes.Interface, row *Row) error {
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pl, err := cs.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	placementStats(nl.Items, pl.Items, row)
	return nil
}

// placementStats computes, over every node, from the drained pods (pods holds the bench
// namespace; terminated pods are left out): the requested CPU / allocatable per node (mean,
// population standard deviation, max; EmptyNodes = nodes with none requested), pods per node
// (mean, standard deviation, max; EmptyNodesByPods = nodes with no pod), and the pods left
// unscheduled.
func placementStats(nodes []corev1.Node, pods []corev1.Pod, row *Row) {
	req := map[string]int64{}
	cnt := map[string]int{}
	row.Unscheduled, row.EmptyNodes, row.EmptyNodesByPods, row.UtilMax, row.PodsPerNodeMax = 0, 0, 0, 0, 0
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" {
			row.Unscheduled++
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		cpu, _ := podRequests(p)
		req[p.Spec.NodeName] += cpu
		cnt[p.Spec.NodeName]++
	}
	us := make([]float64, 0, len(nodes))
	ps := make([]float64, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		u := float64(req[n.Name]) / float64(max(n.Status.Allocatable.Cpu().MilliValue(), 1))
		us = append(us, u)
		ps = append(ps, float64(cnt[n.Name]))
		if req[n.Name] == 0 {
			row.EmptyNodes++
		}
		if cnt[n.Name] == 0 {
			row.EmptyNodesByPods++
		}
		row.UtilMax = math.Max(row.UtilMax, u)
		row.PodsPerNodeMax = max(row.PodsPerNodeMax, cnt[n.Name])
	}
	row.PodsPerNodeHist = make([]int, row.PodsPerNodeMax+1)
	for i := range nodes {
		row.PodsPerNodeHist[cnt[nodes[i].Name]]++
	}
	row.UtilMean, row.UtilStddev = meanStddev(us)
	row.PodsPerNodeMean, row.PodsPerNodeStddev = meanStddev(ps)
}

// meanStddev is the mean and population standard deviation of xs (0, 0 when empty).
func meanStddev(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

// fetchProfile saves the scheduler's /debug/pprof/profile for sec seconds (default 15) to path.
func fetchProfile(ctx context.Context, base string, sec int, path string) error {
	if sec <= 0 {
		sec = 15
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return saveURL(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, sec), path)
}

// saveURL writes the body of a GET to path.
func saveURL(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// procCPU is the user+system CPU seconds of pid.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// Print writes the table: speed (drain pods/s, the bind ceiling and the drain's share of
// it, CPU, latency) and, beside it, placement quality (CPU utilisation over nodes, pods per node).
func Print(w io.Writer, o Options, rows []Row) {
	fmt.Fprintf(w, "\nscheduler benchmark, workload %s: %d pods (pre-created, then the scheduler resumed) on %d KWOK nodes; latency: %d pods created at %.0f/s\n",
		cmp.Or(o.Workload, WorkloadUniform), o.Pods, o.Nodes, o.LatencyPods, o.LatencyQPS)
	if o.BindCeiling {
		fmt.Fprintf(w, "bind ceiling: %d Bindings of pods no scheduler serves, %d in flight, client QPS %d (as the meganode scheduler's); +ev: each Binding followed by its Scheduled Event, as both schedulers write\n",
			o.Pods, cmp.Or(o.BindCeilingWorkers, DefaultBindCeilingWorkers), ceilingClientQPS)
	}
	fmt.Fprintf(w, "%-16s %8s %8s %8s %9s %8s %10s %8s %10s %8s %8s %9s %8s %8s %6s %7s %7s %6s\n", "scheduler", "pods/s", "drain s", "events s", "ceiling/s", "of ceil", "+ev ceil/s", "of +ev",
		"CPU ms/pod", "p50 ms", "p99 ms", "util mean", "util sd", "util max", "empty", "ppn sd", "ppn max", "unsch")
	for _, r := range rows {
		ceil, of, evCeil, evOf, p50, p99 := "-", "-", "-", "-", "-", "-"
		if r.BindCeilingPerSec > 0 {
			ceil, of = fmt.Sprintf("%.0f", r.BindCeilingPerSec), fmt.Sprintf("%.1f%%", r.OfCeiling*100)
		}
		if r.BindEventCeilingPerSec > 0 {
			evCeil, evOf = fmt.Sprintf("%.0f", r.BindEventCeilingPerSec), fmt.Sprintf("%.1f%%", r.OfEventCeiling*100)
		}
		if r.Latency.Count > 0 {
			p50, p99 = fmt.Sprintf("%.1f", r.Latency.P50Us/1e3), fmt.Sprintf("%.1f", r.Latency.P99Us/1e3)
		}
		fmt.Fprintf(w, "%-16s %8.0f %8.2f %8.2f %9s %8s %10s %8s %10.2f %8s %8s %9.4f %8.4f %8.4f %6d %7.2f %7d %6d\n", r.Scheduler, r.PodsPerSec, r.DrainSeconds, r.EventsSeconds, ceil, of, evCeil, evOf,
			r.CPUMsPerPod, p50, p99, r.UtilMean, r.UtilStddev, r.UtilMax, r.EmptyNodesByPods,
			r.PodsPerNodeStddev, r.PodsPerNodeMax, r.Unscheduled)
	}
	fmt.Fprintf(w, "(drain s: resumed → last pod bound; events s: → last Scheduled event written; CPU ms/pod: the scheduler's CPU until then)\n")
	fmt.Fprintf(w, "(util: requested CPU / allocatable per node; empty: nodes without a drained pod; ppn: drained pods per node; all over every node)\n")
}

// scheduledEvents counts the drain pods' Scheduled events (events.k8s.io/v1 — core/v1 events
// are the same objects) from a watch opened before the scheduler resumes.
type scheduledEvents struct {
	w     watch.Interface
	mu    sync.Mutex
	seen  map[string]bool
	last  time.Time
	added chan struct{}
}

func watchScheduledEvents(ctx context.Context, cs kubernetes.Interface) (*scheduledEvents, error) {
	l, err := cs.EventsV1().Events(benchNS).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	w, err := cs.EventsV1().Events(benchNS).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	e := &scheduledEvents{w: w, seen: map[string]bool{}, added: make(chan struct{}, 1)}
	go func() {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*eventsv1.Event)
			if !ok || ev.Type != watch.Added || o.Reason != "Scheduled" || !strings.HasPrefix(o.Regarding.Name, "drain-") {
				continue
			}
			e.mu.Lock()
			if !e.seen[o.Regarding.Name] {
				e.seen[o.Regarding.Name], e.last = true, time.Now()
			}
			e.mu.Unlock()
			select {
			case e.added <- struct{}{}:
			default:
			}
		}
	}()
	return e, nil
}

// wait returns once want events were seen or timeout passed: how many, and t0 → the last one.
func (e *scheduledEvents) wait(ctx context.Context, want int, timeout time.Duration, t0 time.Time) (int, float64) {
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		n, last := len(e.seen), e.last
		e.mu.Unlock()
		if n >= want {
			return n, last.Sub(t0).Seconds()
		}
		select {
		case <-e.added:
		case <-deadline:
			return n, last.Sub(t0).Seconds()
		case <-ctx.Done():
			return n, last.Sub(t0).Seconds()
		}
	}
}

func (e *scheduledEvents) stop() { e.w.Stop() }

// machineCPU is the CPU time every process on the machine has used since boot, in seconds
// (/proc/stat: every state but idle and iowait).
func machineCPU() float64 {
	c, err := procfs.ReadCPUStat()
	if err != nil {
		return 0
	}
	return float64(c.Busy()) / 100 // USER_HZ: 100 on Linux
}
