package cluster

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// KWOK settings: the nodes it manages carry this annotation; leases last 40 s and are renewed
// every 10 s (KWOK renews at a quarter of the duration, like the kubelet).
const (
	NodeAnnotationKey        = "kwok.x-k8s.io/node"
	NodeAnnotationValue      = "fake"
	NodeLeaseDurationSeconds = 40
	KwokVersion              = "v0.8.0"
)

// kwokStageFiles lists the Stage configs (node initialise, lease heartbeat, pod ready/complete/
// delete) that `make k8s-bins` copied from the module cache into bin/kwok-stages, falling back
// to the module cache itself.
func kwokStageFiles(binDir string) ([]string, error) {
	dirs := []string{filepath.Join(binDir, KwokStagesDir)}
	mc := os.Getenv("GOMODCACHE")
	if mc == "" {
		if gp := os.Getenv("GOPATH"); gp != "" {
			mc = filepath.Join(strings.Split(gp, ":")[0], "pkg", "mod")
		} else if h, err := os.UserHomeDir(); err == nil {
			mc = filepath.Join(h, "go", "pkg", "mod")
		}
	}
	if mc != "" {
		dirs = append(dirs, filepath.Join(mc, "sigs.k8s.io", "kwok@"+KwokVersion, "kustomize", "stage"))
	}
	want := map[string]bool{"node-initialize.yaml": true, "node-heartbeat-with-lease.yaml": true,
		"pod-ready.yaml": true, "pod-complete.yaml": true, "pod-delete.yaml": true}
	for _, d := range dirs {
		var files []string
		seen := map[string]bool{}
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil
			}
			b := filepath.Base(p)
			// the module cache has node/fast and pod/fast (and pod/general): take fast ones
			if want[b] && !seen[b] && !strings.Contains(p, "/general/") && !strings.Contains(p, "/testdata/") {
				seen[b] = true
				files = append(files, p)
			}
			return nil
		})
		if len(files) == len(want) {
			sort.Strings(files)
			return files, nil
		}
	}
	return nil, fmt.Errorf("KWOK stage configs not found in %v: run `make k8s-bins`", dirs)
}

// kwokComponent writes KWOK's configuration (options + stages) and builds its command line.
func kwokComponent(st *State, o *UpOptions, kubeconfig string, port int) (Component, error) {
	files, err := kwokStageFiles(o.BinDir)
	if err != nil {
		return Component{}, err
	}
	var buf bytes.Buffer
	buf.WriteString(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 16
  nodePlayStageParallelism: 8
  podPlayStageParallelism: 8
  podsOnNodeSyncParallelism: 4
`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return Component{}, err
		}
		buf.WriteString("---\n")
		buf.Write(bytes.TrimPrefix(b, []byte("---\n")))
		if !bytes.HasSuffix(b, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	cfg := filepath.Join(st.Dir, "kwok.yaml")
	if err := os.WriteFile(cfg, buf.Bytes(), 0o644); err != nil {
		return Component{}, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{filepath.Join(o.BinDir, BinKwok),
		"--kubeconfig=" + kubeconfig,
		"--config=" + cfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + NodeAnnotationKey + "=" + NodeAnnotationValue,
		fmt.Sprintf("--node-lease-duration-seconds=%d", o.nodeLeaseSeconds()),
		"--server-address=" + addr,
		// Pod IPs: a /12 holds 1M pods (KWOK hands them out in order and does not check
		// the bound); clear of the service range (ServiceClusterIPRange).
		"--cidr=10.0.0.1/12",
		"--node-ip=127.0.0.1",
		"--v=WARN", // INFO logs every lease renewal
	}
	return Component{Name: "kwok", Kind: BinKwok, Args: args, URL: "http://" + addr,
		Log: filepath.Join(st.Dir, "logs", "kwok.log")}, nil
}
