package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/meganode/meganode/internal/bench"
)

// Clientset is a client-go clientset for the admin kubeconfig, without client-side rate limits
// (load generators must not be throttled by their own client).
func Clientset(st *State) (*kubernetes.Clientset, error) {
	cfg, err := RESTConfig(st)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// RESTConfig is Clientset's configuration (admin credentials, no client-side rate limit, 60 s
// per request), for a caller that wraps its transport.
func RESTConfig(st *State) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = "meganode"
	cfg.Timeout = 60 * time.Second
	return cfg, nil
}

// NodeOptions describe a batch of KWOK nodes.
type NodeOptions struct {
	Count       int
	Prefix      string // node name prefix; default "kwok-node-"
	Start       int    // first index
	Concurrency int    // parallel creates; default 64
	// Sizes: node i gets Sizes[i % len(Sizes)] (index i counts from 0 at the first node of the
	// cluster, i.e. it includes Start); empty = every node DefaultNodeSize.
	Sizes    []NodeSize
	Progress *bench.Progress
}

// NodeSize is a KWOK node's capacity (the pods capacity stays 110, the kubelet's default).
type NodeSize struct {
	CPU          string `json:"cpu"`           // a quantity, e.g. "8"
	Memory       string `json:"memory"`        // e.g. "32Gi"
	InstanceType string `json:"instance_type"` // the node.kubernetes.io/instance-type label
}

// DefaultNodeSize is the node every caller gets unless it asks otherwise: an 8-core, 32 GiB machine.
var DefaultNodeSize = NodeSize{CPU: "8", Memory: "32Gi", InstanceType: "m5.2xlarge"}

// NodeSizeAt is the size of node i under sizes (empty: DefaultNodeSize).
func NodeSizeAt(sizes []NodeSize, i int) NodeSize {
	if len(sizes) == 0 {
		return DefaultNodeSize
	}
	return sizes[((i%len(sizes))+len(sizes))%len(sizes)]
}

var zones = []string{"zone-a", "zone-b", "zone-c"}

// NodeObject is a KWOK node with realistic capacity and labels (an 8-core, 32 GiB machine
// with room for 110 pods), annotated so KWOK manages it.
func NodeObject(name string, i int) *corev1.Node {
	return NodeObjectSized(name, i, DefaultNodeSize)
}

// NodeObjectSized is NodeObject with the given CPU, memory and instance type.
func NodeObjectSized(name string, i int, size NodeSize) *corev1.Node {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(size.CPU),
		corev1.ResourceMemory:           resource.MustParse(size.Memory),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// No node.alpha.kubernetes.io/ttl: the controller-manager's TTL controller sets it.
			Annotations: map[string]string{NodeAnnotationKey: NodeAnnotationValue},
			Labels: map[string]string{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"type":                             "kwok",
				"node.kubernetes.io/instance-type": size.InstanceType,
				"topology.kubernetes.io/region":    "meganode-local",
				"topology.kubernetes.io/zone":      zones[i%len(zones)],
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    rl,
			Allocatable: rl,
			Phase:       corev1.NodeRunning,
			NodeInfo: corev1.NodeSystemInfo{
				Architecture: "amd64", OperatingSystem: "linux", OSImage: "kwok",
				KubeletVersion: "v1.36.3-kwok", KernelVersion: "kwok",
				ContainerRuntimeVersion: "kwok",
			},
		},
	}
}

// MakeNodes creates o.Count nodes with client-go at high concurrency (existing ones are kept).
func MakeNodes(ctx context.Context, cs kubernetes.Interface, o NodeOptions) error {
	if o.Prefix == "" {
		o.Prefix = "kwok-node-"
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	idx := make(chan int)
	var wg sync.WaitGroup
	o.Progress.Start(fmt.Sprintf("creating %d nodes", o.Count), int64(o.Count), 0, done.Load)
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				name := fmt.Sprintf("%s%06d", o.Prefix, i)
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					_, err = cs.CoreV1().Nodes().Create(ctx, NodeObjectSized(name, i, NodeSizeAt(o.Sizes, i)), metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						err = nil
						break
					}
					time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("create node %s: %w", name, err)
					}
					mu.Unlock()
				}
				done.Add(1)
			}
		}()
	}
	for i := o.Start; i < o.Start+o.Count && ctx.Err() == nil; i++ {
		idx <- i
	}
	close(idx)
	wg.Wait()
	o.Progress.Done()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeSchedulable reports whether a scheduler may place pods on the node: Ready, not cordoned,
// and without the node lifecycle controller's not-ready/unreachable taints. Ready comes first:
// KWOK sets the condition at once, but the controller-manager lifts the not-ready taint (which
// the apiserver adds to every new node) node by node — at 5,000 nodes ≈3,000 were still tainted
// when the last turned Ready — and a scheduler started then sees only the untainted part of the
// cluster, which skews every placement-spread figure.
func NodeSchedulable(n *corev1.Node) bool {
	if !NodeReady(n) || n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return true
}

// CountReadyNodes lists nodes (from the watch cache) and counts the Ready ones.
func CountReadyNodes(ctx context.Context, cs kubernetes.Interface) (total, ready int, err error) {
	total, ready, _, err = CountNodes(ctx, cs)
	return total, ready, err
}

// CountNodes lists nodes (from the watch cache) and counts the Ready and the schedulable ones.
func CountNodes(ctx context.Context, cs kubernetes.Interface) (total, ready, schedulable int, err error) {
	opts := metav1.ListOptions{ResourceVersion: "0"} // served whole from the watch cache
	l, err := cs.CoreV1().Nodes().List(ctx, opts)
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range l.Items {
		total++
		if NodeReady(&l.Items[i]) {
			ready++
		}
		if NodeSchedulable(&l.Items[i]) {
			schedulable++
		}
	}
	return total, ready, schedulable, nil
}

// WaitNodesReady waits until at least want nodes are Ready and schedulable (NodeSchedulable).
func WaitNodesReady(ctx context.Context, cs kubernetes.Interface, want int, timeout time.Duration, prog *bench.Progress) error {
	var ready atomic.Int64
	prog.Start(fmt.Sprintf("waiting for %d nodes Ready and untainted", want), int64(want), 0, ready.Load)
	defer prog.Done()
	deadline := time.Now().Add(timeout)
	for {
		_, _, r, err := CountNodes(ctx, cs)
		if err == nil {
			ready.Store(int64(r))
			if r >= want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready and untainted after %s (last error: %v)", r, want, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
