package cluster

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meganode/meganode/internal/pki"
	"github.com/meganode/meganode/internal/storeproc"
)

// Hollow kubelets (`up --kubelets N`, issue 39): N processes of bin/kubemark (cmd/kubemark), each
// the kubelet's own code over a fake runtime, registering its own Node, renewing its Lease and
// running pods through the kubelet's status manager. Each authenticates with a client
// certificate of its own (system:node:<name> in system:nodes), so kube-apiserver runs the Node
// authorizer and the NodeRestriction admission plugin for them as for real kubelets.
const (
	BinKubemark       = "kubemark"
	KubeletNodePrefix = "kubelet-node-"
	// AgentLabel tells hollow-kubelet nodes (AgentHollowKubelet) from KWOK nodes (no label).
	AgentLabel         = "meganode.io/agent"
	AgentHollowKubelet = "hollow-kubelet"
	kubeletsDir        = "kubelets"
)

// KubeletNodeName is the name of hollow kubelet i.
func KubeletNodeName(i int) string { return fmt.Sprintf("%s%06d", KubeletNodePrefix, i) }

// kubeletComponents writes each hollow node's certificate and kubeconfig under
// <state>/kubelets/<name>/ and builds its command line: node i serves the kubelet API on
// 127.0.0.1:base+i (its port range is that one port: the fake runtime is a unix socket in its
// directory, the read-only port and healthz server are off).
func kubeletComponents(st *State, o *UpOptions, p *PKI) ([]Component, error) {
	if o.Kubelets <= 0 {
		return nil, nil
	}
	ca, err := pki.LoadCA(p.CACert, p.CAKey)
	if err != nil {
		return nil, err
	}
	base, err := storeproc.FreePortRange(o.Kubelets)
	if err != nil {
		return nil, fmt.Errorf("--kubelets: %w", err)
	}
	out := make([]Component, 0, o.Kubelets)
	for i := 0; i < o.Kubelets; i++ {
		name := KubeletNodeName(i)
		dir := filepath.Join(st.Dir, kubeletsDir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		crt, key := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
		t := &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if err := ca.Issue(t, crt, key); err != nil {
			return nil, err
		}
		kc := filepath.Join(dir, "kubeconfig")
		if err := WriteKubeconfig(kc, st.APIServerURL, p.CACert, crt, key, "system:node:"+name); err != nil {
			return nil, err
		}
		size := NodeSizeAt(o.NodeSizes, o.Nodes+i)
		// type=kwok: the label the load pods of create-pods select (podSpec), so they land on
		// either kind of node; AgentLabel tells the kinds apart.
		labels := []string{"type=kwok", AgentLabel + "=" + AgentHollowKubelet,
			"node.kubernetes.io/instance-type=" + size.InstanceType,
			"topology.kubernetes.io/region=meganode-local", "topology.kubernetes.io/zone=" + zones[(o.Nodes+i)%len(zones)]}
		port := base + i
		args := []string{filepath.Join(o.BinDir, BinKubemark),
			"--name=" + name, "--kubeconfig=" + kc, "--root-dir=" + filepath.Join(dir, "root"),
			fmt.Sprintf("--port=%d", port), "--cpu=" + size.CPU, "--memory=" + size.Memory,
			"--node-labels=" + strings.Join(labels, ","),
			fmt.Sprintf("--probes=%t", o.KubeletProbes), "--v=0",
		}
		out = append(out, Component{Name: name, Kind: BinKubemark, Args: args, URL: fmt.Sprintf("http://127.0.0.1:%d", port),
			Log: filepath.Join(st.Dir, "logs", kubeletsDir, name+".log"), DataDir: dir})
	}
	return out, nil
}

// startKubelets starts the hollow kubelets (state saved every 50 and at the end, not after each).
func startKubelets(st *State, comps []Component) error {
	for i, c := range comps {
		st.Components = append(st.Components, c)
		if err := st.Components[len(st.Components)-1].start(); err != nil {
			return err
		}
		if i%50 == 49 {
			if err := st.Save(); err != nil {
				return err
			}
		}
	}
	return st.Save()
}

// waitKubeletsServing waits until every hollow kubelet answers /healthz on its port (the kubelet
// server starts once the kubelet has initialised), failing early when one has exited.
func waitKubeletsServing(ctx context.Context, st *State, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pending := map[string]bool{}
	for _, c := range st.Components {
		if c.Kind == BinKubemark {
			pending[c.Name] = true
		}
	}
	for len(pending) > 0 {
		for i := range st.Components {
			c := &st.Components[i]
			if !pending[c.Name] {
				continue
			}
			if !c.Alive() {
				return fmt.Errorf("hollow kubelet %s exited: %s", c.Name, lastLogLine(c.Log))
			}
			if code, _, err := get(ctx, insecureClient, c.URL+"/healthz"); err == nil && code == 200 {
				delete(pending, c.Name)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d hollow kubelets not serving after %s", len(pending), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

func lastLogLine(path string) string {
	return strings.TrimSpace(tail(path, 1))
}

// stopKubelets stops every running hollow kubelet at once (SIGTERM, SIGKILL after grace): one
// after the other, a thousand of them would take a thousand polls.
func stopKubelets(s *State, grace time.Duration, log func(string, ...any)) error {
	var alive []*Component
	for i := range s.Components {
		if c := &s.Components[i]; c.Kind == BinKubemark && c.Alive() {
			alive = append(alive, c)
		}
	}
	if len(alive) == 0 {
		return nil
	}
	if log != nil {
		log("stopping %d hollow kubelets", len(alive))
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, c := range alive {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.Stop(grace); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d hollow kubelets survived: %v", len(errs), errs[0])
	}
	return nil
}
