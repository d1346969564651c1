package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/cluster"
)

// TestHollowKubelets is `meganode up --nodes 0 --kubelets 3` (issue 39): three hollow kubelets
// (the kubelet's own code over a fake runtime, bin/kubemark) register their nodes and renew
// their leases; the pods create-pods makes are scheduled onto them and reach Running through
// the kubelet's status manager (the status is the kubelet's: its field manager, its pod IP, its
// Ready condition), with the kubelet's Events; a graceful delete is finished by the kubelet; and
// down leaves no process behind.
func TestHollowKubelets(t *testing.T) {
	const kubelets, pods, ns = 3, 9, "e2e-kubelets"
	bd := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stateDir := filepath.Join(t.TempDir(), "cluster")
	began := time.Now()
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: stateDir, Store: cluster.StoreMeganode, StoreShards: 1,
		Nodes: 0, Kubelets: kubelets, BinDir: bd})
	tearDown(t, st)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Logf("up with %d hollow kubelets in %.1fs", kubelets, time.Since(began).Seconds())
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}

	// The nodes are the kubelets' own: registered by them, with their version and a lease each.
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nl.Items) != kubelets {
		t.Fatalf("nodes: %d %v", len(nl.Items), err)
	}
	for _, n := range nl.Items {
		if n.Labels[cluster.AgentLabel] != cluster.AgentHollowKubelet || n.Status.NodeInfo.KubeletVersion != "v1.36.3" || !cluster.NodeReady(&n) {
			t.Errorf("node %s: labels %v, kubelet %q, ready %v", n.Name, n.Labels, n.Status.NodeInfo.KubeletVersion, cluster.NodeReady(&n))
		}
		if n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			t.Errorf("node %s: no kubelet endpoint", n.Name)
		}
	}
	// Each kubelet's lease (it tries before its Node exists and retries, so it may trail the Node).
	waitFor(ctx, t, 30*time.Second, "a lease held by each hollow kubelet", func() error {
		for _, n := range nl.Items {
			l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != n.Name || l.Spec.RenewTime == nil {
				return fmt.Errorf("lease of %s: %+v", n.Name, l.Spec)
			}
		}
		return nil
	})

	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
	run, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: ns, Count: pods, Timeout: 90 * time.Second})
	if err != nil || run.Running != pods {
		t.Fatalf("pods: %+v %v", run, err)
	}
	t.Logf("%d pods Running on hollow kubelets: startup p50 %.0fms p99 %.0fms", run.Running, run.Startup.P50Us/1e3, run.Startup.P99Us/1e3)
	pl, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != pods {
		t.Fatalf("list pods: %d %v", len(pl.Items), err)
	}
	onNode := map[string]int{}
	for _, p := range pl.Items {
		onNode[p.Spec.NodeName]++
		if !strings.HasPrefix(p.Spec.NodeName, cluster.KubeletNodePrefix) || p.Status.Phase != corev1.PodRunning ||
			p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			t.Errorf("pod %s on %q: phase %s, ip %q, containers %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
		}
		if m := statusManagers(&p); !m["hollow-kubelet"] {
			t.Errorf("pod %s: status not written by the kubelet (status managers %v)", p.Name, m)
		}
	}
	t.Logf("pods per node: %v", onNode)

	// Events: the scheduler's, and the kubelet's own for each pod (pulled, created, started).
	waitFor(ctx, t, 30*time.Second, "the kubelet's Events for every pod", func() error {
		ev, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		started := map[string]bool{}
		for _, e := range ev.Items {
			if e.Source.Component == "kubelet" && strings.HasPrefix(e.Source.Host, cluster.KubeletNodePrefix) && e.Reason == "Started" {
				started[e.InvolvedObject.Name] = true
			}
		}
		if len(started) != pods {
			return fmt.Errorf("%d events, Started from a kubelet for %d of %d pods", len(ev.Items), len(started), pods)
		}
		return nil
	})
	if ev, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"}); err != nil || len(ev.Items) == 0 {
		t.Errorf("no node Events from the kubelets (Starting, NodeReady…): %v", err)
	}

	// A graceful delete: the apiserver marks the pod, the kubelet stops it and removes it.
	victim := pl.Items[0].Name
	grace := int64(5)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 30*time.Second, "the kubelet finishes the graceful delete of "+victim, func() error {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})

	if err := st.Down(10*time.Second, nil); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, c := range st.Components {
		if c.Alive() {
			t.Errorf("%s (pid %d) still runs after down", c.Name, c.Pid)
		}
	}
	if left := cluster.ProcessesUnder(st.Dir); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
}

// statusManagers are the field managers of the pod's status subresource.
func statusManagers(p *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, m := range p.ManagedFields {
		if m.Subresource == "status" {
			out[m.Manager] = true
		}
	}
	return out
}
