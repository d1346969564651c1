package cluster

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/procfs"
)

// The scale run (issue 37, part 2; `meganode bench scale`): the reference's procedure through a
// real kube-apiserver — make the nodes, wait until every node is Ready (and untainted) and its
// Lease exists, create the pods, wait until every pod has a node — at one size on one stack.
// This file has what the command measures with: the node/lease watch, the placement check, and
// the machine's memory and CPU. The command (cmd/meganode/bench_scale.go) runs the phases and
// writes the report (scale_report.go).

// ProtobufClientset is Clientset speaking protobuf: at 100K objects a JSON watch or list costs
// kube-apiserver several times the CPU.
func ProtobufClientset(st *State) (*kubernetes.Clientset, error) {
	cfg, err := RESTConfig(st)
	if err != nil {
		return nil, err
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.Timeout = 5 * time.Minute // a 100K-pod list
	return kubernetes.NewForConfig(cfg)
}

// NodeWatch counts, through one watch of the nodes and one of kube-node-lease's Leases (their
// objects trimmed to what is counted, so that 100K of them cost little memory here), the
// nodes that are Ready with their Lease (the reference's "every node and its Lease exist") and
// those also schedulable (NodeSchedulable: the node lifecycle controller has lifted the
// not-ready taint every new node gets).
type NodeWatch struct {
	mu         sync.Mutex
	state      map[string]uint8 // node name → nodeReady | nodeSched | leaseOK
	readyLease atomic.Int64     // Ready with a Lease
	schedLease atomic.Int64     // schedulable with a Lease
	ready      atomic.Int64     // Ready
	leases     atomic.Int64     // Leases
	stop       context.CancelFunc
}

const (
	nodeReady uint8 = 1
	leaseOK   uint8 = 2
	nodeSched uint8 = 4
)

// StartNodeWatch starts both watches and waits until they have listed.
func StartNodeWatch(ctx context.Context, cs kubernetes.Interface) (*NodeWatch, error) {
	w := &NodeWatch{state: map[string]uint8{}}
	wctx, stop := context.WithCancel(ctx)
	w.stop = stop
	nf := informers.NewSharedInformerFactory(cs, 0)
	ni := nf.Core().V1().Nodes().Informer()
	if err := ni.SetTransform(trimNode); err != nil {
		stop()
		return nil, err
	}
	lf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	li := lf.Coordination().V1().Leases().Informer()
	if err := li.SetTransform(trimLease); err != nil {
		stop()
		return nil, err
	}
	_, _ = ni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.node(o, false) },
		UpdateFunc: func(_, o any) { w.node(o, false) },
		DeleteFunc: func(o any) { w.node(o, true) },
	})
	_, _ = li.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.lease(o, false) },
		UpdateFunc: func(_, o any) { w.lease(o, false) },
		DeleteFunc: func(o any) { w.lease(o, true) },
	})
	nf.Start(wctx.Done())
	lf.Start(wctx.Done())
	if !cache.WaitForCacheSync(wctx.Done(), ni.HasSynced, li.HasSynced) {
		stop()
		return nil, fmt.Errorf("node and lease watches did not sync")
	}
	return w, nil
}

func trimNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	t := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
		Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints}}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			t.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return t, nil
}

func trimLease(o any) (any, error) {
	l, ok := o.(*coordv1.Lease)
	if !ok {
		return o, nil
	}
	return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion}}, nil
}

func objName(o any) string {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if m, ok := o.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

func (w *NodeWatch) set(name string, mask, bits uint8) {
	if name == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.state[name]
	nw := old&^mask | bits
	if nw == old {
		return
	}
	if nw == 0 {
		delete(w.state, name)
	} else {
		w.state[name] = nw
	}
	count := func(c *atomic.Int64, want uint8) {
		was, is := old&want == want, nw&want == want
		switch {
		case is && !was:
			c.Add(1)
		case was && !is:
			c.Add(-1)
		}
	}
	count(&w.ready, nodeReady)
	count(&w.leases, leaseOK)
	count(&w.readyLease, nodeReady|leaseOK)
	count(&w.schedLease, nodeSched|leaseOK)
}

func (w *NodeWatch) node(o any, deleted bool) {
	n, _ := o.(*corev1.Node)
	var bits uint8
	if !deleted && n != nil && NodeReady(n) {
		bits |= nodeReady
	}
	if !deleted && n != nil && NodeSchedulable(n) {
		bits |= nodeSched
	}
	w.set(objName(o), nodeReady|nodeSched, bits)
}

func (w *NodeWatch) lease(o any, deleted bool) {
	var bits uint8
	if !deleted {
		bits = leaseOK
	}
	w.set(objName(o), leaseOK, bits)
}

// Counts: nodes Ready with their Lease, schedulable with their Lease, Ready, Leases.
func (w *NodeWatch) Counts() (readyLease, schedLease, ready, leases int) {
	return int(w.readyLease.Load()), int(w.schedLease.Load()), int(w.ready.Load()), int(w.leases.Load())
}

// Wait returns when want nodes are schedulable with their Lease, with a progress bar, and
// when want nodes were first Ready with their Lease (zero if that never happened).
func (w *NodeWatch) Wait(ctx context.Context, want int, timeout time.Duration, prog *bench.Progress) (readyAt time.Time, err error) {
	prog.Start(fmt.Sprintf("waiting for %d nodes Ready with their Lease", want), int64(want), 0, w.readyLease.Load)
	defer prog.Done()
	deadline := time.Now().Add(timeout)
	for {
		rl, sl, ready, leases := w.Counts()
		if rl >= want && readyAt.IsZero() {
			readyAt = time.Now()
			prog.Done()
			prog.Start(fmt.Sprintf("waiting for the node lifecycle controller to untaint %d nodes", want), int64(want), 0, w.schedLease.Load)
		}
		if sl >= want {
			return readyAt, nil
		}
		if time.Now().After(deadline) {
			return readyAt, fmt.Errorf("%w: %d of %d nodes Ready with their Lease, %d untainted, after %s (%d Ready, %d Leases)",
				ErrScaleTimeout, rl, want, sl, timeout, ready, leases)
		}
		select {
		case <-ctx.Done():
			return readyAt, context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends both watches.
func (w *NodeWatch) Stop() { w.stop() }

// ErrScaleTimeout marks a phase that did not finish in its time.
var ErrScaleTimeout = fmt.Errorf("timeout")

// Placement is where the pods landed: every pod bound once, no node over its allocatable.
type Placement struct {
	Pods          int     `json:"pods"`           // listed
	Bound         int     `json:"bound"`          // with spec.nodeName
	NodesUsed     int     `json:"nodes_used"`     // nodes with at least one pod
	EmptyNodes    int     `json:"empty_nodes"`    // of the nodes given
	MaxPerNode    int     `json:"max_per_node"`   // pods on the fullest node
	StdevPerNode  float64 `json:"stdev_per_node"` // over all nodes given
	OverCommitted int     `json:"over_committed"` // nodes whose pods' requests exceed their allocatable (CPU, memory or pod count)
}

// CheckPlacement lists the pods of ns (from the watch cache) and counts them per node against
// the nodes' allocatable (every node the default size, as MakeNodes makes them).
func CheckPlacement(ctx context.Context, cs kubernetes.Interface, ns string, nodes int) (*Placement, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	type use struct {
		pods     int
		cpu, mem int64
	}
	per := map[string]*use{}
	p := &Placement{Pods: len(l.Items)}
	for i := range l.Items {
		pod := &l.Items[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		p.Bound++
		u := per[pod.Spec.NodeName]
		if u == nil {
			u = &use{}
			per[pod.Spec.NodeName] = u
		}
		u.pods++
		for _, c := range pod.Spec.Containers {
			u.cpu += c.Resources.Requests.Cpu().MilliValue()
			u.mem += c.Resources.Requests.Memory().Value()
		}
	}
	size := DefaultNodeSize
	cpu, mem := resource.MustParse(size.CPU), resource.MustParse(size.Memory)
	var sum, sq float64
	for _, u := range per {
		p.MaxPerNode = max(p.MaxPerNode, u.pods)
		if u.pods > 110 || u.cpu > cpu.MilliValue() || u.mem > mem.Value() {
			p.OverCommitted++
		}
		sum += float64(u.pods)
		sq += float64(u.pods) * float64(u.pods)
	}
	p.NodesUsed = len(per)
	n := float64(max(nodes, len(per)))
	p.EmptyNodes = max(nodes-len(per), 0)
	if n > 0 {
		mean := sum / n
		p.StdevPerNode = math.Sqrt(math.Max(sq/n-mean*mean, 0))
	}
	return p, nil
}

// MemAvailableBytes is /proc/meminfo's MemAvailable.
func MemAvailableBytes() (int64, error) {
	m, err := procfs.MemInfo()
	if err != nil {
		return 0, err
	}
	a, ok := m["MemAvailable"]
	if !ok {
		return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
	}
	return int64(a), nil
}

// Watchdog watches a run's machine and processes: it cancels the run's context (with the cause)
// when MemAvailable falls below a floor or a component exits, and keeps the lowest MemAvailable.
type Watchdog struct {
	cancel   context.CancelCauseFunc
	floor    int64
	minAvail atomic.Int64
	stopped  chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	statePtr *State
}

// StartWatchdog checks every interval; cancel is the run context's.
func StartWatchdog(st *State, cancel context.CancelCauseFunc, floorBytes int64, interval time.Duration) *Watchdog {
	w := &Watchdog{cancel: cancel, floor: floorBytes, stopped: make(chan struct{}), done: make(chan struct{}), statePtr: st}
	w.minAvail.Store(math.MaxInt64)
	go func() {
		defer close(w.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			w.check()
			select {
			case <-w.stopped:
				return
			case <-tk.C:
			}
		}
	}()
	return w
}

// ErrScaleMemory and ErrScaleProcess are the watchdog's causes.
var (
	ErrScaleMemory  = fmt.Errorf("memory")
	ErrScaleProcess = fmt.Errorf("process exited")
)

func (w *Watchdog) check() {
	if a, err := MemAvailableBytes(); err == nil {
		for {
			old := w.minAvail.Load()
			if a >= old || w.minAvail.CompareAndSwap(old, a) {
				break
			}
		}
		if a < w.floor {
			w.cancel(fmt.Errorf("%w: MemAvailable fell to %d MiB, below the floor of %d MiB", ErrScaleMemory, a>>20, w.floor>>20))
		}
	}
	for i := range w.statePtr.Components {
		c := &w.statePtr.Components[i]
		if !c.Alive() {
			w.cancel(fmt.Errorf("%w: %s (pid %d) is gone; its log: %s", ErrScaleProcess, c.Name, c.Pid, c.Log))
			return
		}
	}
}

// MinAvailMiB is the lowest MemAvailable seen (nil before the first sample).
func (w *Watchdog) MinAvailMiB() *float64 {
	v := w.minAvail.Load()
	if v == math.MaxInt64 {
		return nil
	}
	return ptr(float64(v) / (1 << 20))
}

// CPUMark is a moment's /proc/stat, to measure the machine's busy cores from.
type CPUMark struct{ busy, total uint64 }

// MarkCPU reads /proc/stat now.
func MarkCPU() CPUMark {
	c, _ := procfs.ReadCPUStat()
	return CPUMark{c.Busy(), c.Total()}
}

// BusyCores is the machine's CPU busy (every process) since m, in cores (nil: not measured).
func (m CPUMark) BusyCores(cores int) *float64 {
	c, err := procfs.ReadCPUStat()
	b, t := c.Busy(), c.Total()
	if err != nil || m.total == 0 || t <= m.total {
		return nil
	}
	return ptr(float64(b-m.busy) / float64(t-m.total) * float64(cores))
}

// Stop ends the checks.
func (w *Watchdog) Stop() {
	w.stopOnce.Do(func() { close(w.stopped) })
	<-w.done
}
