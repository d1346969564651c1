// Command kubemark is a hollow node for `meganode up --kubelets N`: the kubelet's own code
// (k8s.io/kubernetes v1.36.3, pkg/kubemark's HollowKubelet, run through kubelet/app.RunKubelet)
// over an in-process fake container runtime, fake cAdvisor, stub container manager and fake
// mounter, so it needs no container runtime, no cgroups and no privileges beyond reading
// /dev/kmsg (the kubelet's OOM watcher, which a real event recorder turns on).
//
// It differs from upstream's cmd/kubemark (app.NewHollowNodeCommand, --morph=kubelet) where
// running many of them on one machine needs it, and nowhere in the kubelet's behaviour:
//   - the kubelet server binds 127.0.0.1:--port (upstream hard-codes 0.0.0.0), the read-only
//     port is off, and nothing else listens on TCP;
//   - the fake CRI socket, the kubelet's root directory and its temporary directories live in
//     --root-dir (upstream puts sockets in /tmp and its root in $TMPDIR);
//   - the fake image service is used (upstream dials containerd by default);
//   - events go to the API through the kubelet's own recorder (upstream's hollow node gives
//     the kubelet a fake recorder, so a kubemark cluster writes no kubelet Events);
//   - the machine size reported through cAdvisor is --cpu/--memory (upstream: 1 core, 3.75 GB),
//     so a hollow node offers what a KWOK node of `meganode up` offers;
//   - the client QPS and burst are the kubelet's defaults (50/100; upstream kubemark: 10/20);
//   - probes are off (upstream's fake prober) unless --probes;
//   - pods get a cluster DNS address (10.96.0.10, as kubeadm's), so no MissingClusterDNS warning
//     Event per pod that a real cluster would not write.
//
// `make k8s-bins` builds it with the same version ldflags as kube-apiserver.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/api/resource"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"

	_ "k8s.io/component-base/metrics/prometheus/restclient" // client metrics, as the kubelet registers them
)

// machine is the fake cAdvisor with the machine size set by flags.
type machine struct {
	*cadvisortest.Fake
	cores  int
	memory uint64
}

func (m machine) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	mi, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	mi.NumCores, mi.MemoryCapacity = m.cores, m.memory
	return mi, nil
}

type options struct {
	name, kubeconfig, rootDir, nodeIP, cpu, memory, labels string
	port, maxPods                                          int
	probes, version                                        bool
}

func main() {
	var o options
	fs := pflag.NewFlagSet("kubemark", pflag.ContinueOnError)
	fs.StringVar(&o.name, "name", "", "node name (required)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig with this node's credentials (required)")
	fs.StringVar(&o.rootDir, "root-dir", "", "directory for the kubelet's state, the fake CRI socket and temporary files (required)")
	fs.IntVar(&o.port, "port", 0, "port of the kubelet server on 127.0.0.1 (required)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "address the node reports (default: this host's first non-loopback IPv4; the kubelet refuses loopback)")
	fs.StringVar(&o.cpu, "cpu", "8", "CPU capacity the node reports")
	fs.StringVar(&o.memory, "memory", "32Gi", "memory capacity the node reports")
	fs.IntVar(&o.maxPods, "max-pods", 110, "pod capacity")
	fs.StringVar(&o.labels, "node-labels", "", "labels the node registers with, k=v,k=v")
	fs.BoolVar(&o.probes, "probes", false, "run the kubelet's real prober (probes run against the fake runtime) instead of the fake one")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubemark:", err)
		os.Exit(2)
	}
	if o.version {
		fmt.Printf("kubemark %s\n", version.Get().GitVersion)
		return
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "kubemark:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.name == "" || o.kubeconfig == "" || o.rootDir == "" || o.port <= 0 {
		return fmt.Errorf("--name, --kubeconfig, --root-dir and --port are required")
	}
	cpu, err := resource.ParseQuantity(o.cpu)
	if err != nil {
		return fmt.Errorf("--cpu: %w", err)
	}
	mem, err := resource.ParseQuantity(o.memory)
	if err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(o.labels, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--node-labels: %q is not k=v", kv)
		}
		labels[k] = v
	}
	if o.nodeIP == "" {
		if o.nodeIP, err = hostIP(); err != nil {
			return err
		}
	}
	root, err := filepath.Abs(o.rootDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	// GetHollowKubeletConfig makes the kubelet's root, static-pod and log directories with
	// os.MkdirTemp: keep them in --root-dir.
	if err := os.Setenv("TMPDIR", root); err != nil {
		return err
	}
	klog.Infof("hollow kubelet %s, version %+v", o.name, version.Get())

	flags, cfg := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: o.name, KubeletPort: o.port, KubeletReadOnlyPort: 0, MaxPods: o.maxPods, NodeLabels: labels,
	})
	cfg.Address = "127.0.0.1"
	// A cluster DNS address as kubeadm's, so pods get no MissingClusterDNS warning Event
	// (upstream's hollow node has none; the fake runtime never resolves through it).
	cfg.ClusterDNS, cfg.ClusterDomain = []string{"10.96.0.10"}, "cluster.local"
	cfg.ReadOnlyPort = 0
	flags.NodeIP = o.nodeIP

	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	rc.ContentType = cfg.ContentType
	rc.QPS, rc.Burst = float32(cfg.KubeAPIQPS), int(cfg.KubeAPIBurst)
	rc.UserAgent = "hollow-kubelet/" + o.name
	client, err := clientset.NewForConfig(rc)
	if err != nil {
		return err
	}
	// The heartbeat client as the kubelet makes it: no rate limit, a timeout of the shorter
	// of the status update period and the lease duration.
	hb := *rc
	hb.QPS = -1
	hb.Timeout = min(cfg.NodeStatusUpdateFrequency.Duration, time.Duration(cfg.NodeLeaseDurationSeconds)*time.Second)
	heartbeat, err := clientset.NewForConfig(&hb)
	if err != nil {
		return err
	}

	// Events through a client of their own with the kubelet's event QPS and burst, as the
	// kubelet builds it.
	ev := *rc
	ev.QPS, ev.Burst = float32(cfg.EventRecordQPS), int(cfg.EventBurst)
	events, err := clientset.NewForConfig(&ev)
	if err != nil {
		return err
	}

	endpoint := "unix://" + filepath.Join(root, "cri.sock")
	_ = os.Remove(filepath.Join(root, "cri.sock"))
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("fake runtime: %w", err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return fmt.Errorf("runtime service: %w", err)
	}

	hk := kubemark.NewHollowKubelet(flags, cfg, client, heartbeat,
		machine{Fake: &cadvisortest.Fake{NodeName: o.name}, cores: int(cpu.Value()), memory: uint64(mem.Value())},
		fakeRuntime.ImageService, runtimeService, cm.NewStubContainerManager())
	hk.KubeletDeps.Recorder = nil // RunKubelet makes the kubelet's real recorder, sending through EventClient
	hk.KubeletDeps.EventClient = events.CoreV1()
	if o.probes {
		hk.KubeletDeps.ProbeManager = nil // the kubelet makes its real prober manager
	}
	hk.Run(ctx) // blocks; SIGTERM ends the process
	return nil
}

// hostIP is the first IPv4 address of an up, non-loopback interface: the address the node
// reports (the kubelet validates that it is local and not loopback; nothing listens on it).
func hostIP() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no non-loopback IPv4 address for the node to report: pass --node-ip")
}
