// Package proxy records a short real kube-apiserver session through `meganode etcd-proxy`
// (`meganode up --record`) and replays it into a fresh meganode-store.
package proxy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/etcdproxy"
	"github.com/meganode/meganode/internal/storeproc"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, _ := os.Getwd()
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	t.Fatal("repository root (go.mod) not found")
	return ""
}

func TestRecordApiserverSessionAndReplay(t *testing.T) {
	root := repoRoot(t)
	bd := filepath.Join(root, "bin")
	if err := cluster.CheckBins(bd, cluster.StoreMeganode); err != nil {
		t.Fatalf("this test needs the binaries `make` builds: %v", err)
	}
	// The proxy runs as a child process of this binary's meganode command, built fresh so it
	// has etcd-proxy whatever bin/meganode is.
	tmp := t.TempDir()
	self := filepath.Join(tmp, "meganode")
	build := exec.Command("go", "build", "-o", self, "./cmd/meganode")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/meganode: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rec := filepath.Join(tmp, "apiserver.jsonl")
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: filepath.Join(tmp, "cluster"), Store: cluster.StoreMeganode, StoreShards: 1,
		Nodes: 10, Pods: 5, BinDir: bd, Record: rec, ProxyCmd: []string{self, "etcd-proxy"}})
	if st != nil {
		defer func() { _ = st.Down(10*time.Second, nil) }()
	}
	if err != nil {
		t.Fatalf("up --record: %v", err)
	}
	if st.Component(cluster.ProxyName) == nil || st.EtcdProxyURL == "" {
		t.Fatalf("no %s in the state: %+v", cluster.ProxyName, st.Components)
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.EnsureNamespace(ctx, cs, "rec"); err != nil {
		t.Fatal(err)
	}
	run, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: "rec", Count: 5, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("pods: %v", err)
	}
	t.Logf("%d pods Running", run.Running)
	if n, err := cluster.DeletePods(ctx, cs, "rec", time.Minute, nil); err != nil || n != 5 {
		t.Fatalf("delete pods: %d %v", n, err)
	}
	// down stops the proxy too (it flushes the recording on SIGTERM).
	proxyPid := st.Component(cluster.ProxyName).Pid
	if err := st.Down(15*time.Second, nil); err != nil {
		t.Fatalf("down: %v", err)
	}
	if st.Component(cluster.ProxyName).Alive() {
		t.Fatalf("etcd-proxy (pid %d) still runs after down", proxyPid)
	}

	lines, err := etcdproxy.ReadRecording(rec)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(rec)
	t.Logf("recording: %d lines, %d bytes", len(lines), fi.Size())
	if len(lines) < 1000 {
		t.Fatalf("recording has %d lines; a session with 10 nodes and 5 pods makes thousands", len(lines))
	}

	store, err := storeproc.Start(storeproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { store.Stop(); os.RemoveAll(store.DataDir) }()
	sum, err := etcdproxy.Replay(ctx, lines, etcdproxy.ReplayOptions{Endpoint: store.Endpoint})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	var b bytes.Buffer
	sum.Print(&b, 50)
	t.Logf("replay of the apiserver session into a fresh meganode-store:\n%s", b.String())
	if sum.Replayed() < 500 {
		t.Fatalf("only %d calls replayed", sum.Replayed())
	}
	if len(sum.RevisionGaps) > 0 {
		t.Errorf("the recording has revisions no recorded write made (first %d): the proxy missed writes", sum.RevisionGaps[0])
	}
	// A mismatch is a store bug (or a replay limit) and is listed above. MEGANODE_E2E_PROXY_LENIENT=1
	// only prints them, for looking at a store change that is known to differ.
	if len(sum.Mismatches) > 0 {
		if os.Getenv("MEGANODE_E2E_PROXY_LENIENT") != "" {
			t.Logf("%d mismatches (lenient)", len(sum.Mismatches))
		} else {
			t.Fatalf("%d mismatches between the recorded apiserver session and its replay into meganode-store", len(sum.Mismatches))
		}
	}
}
