package k8s

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/cluster"
)

// TestKubeAPIServerOverMutualTLS: `up --store-tls` — kube-apiserver, unchanged, keeps its objects
// in meganode-store over mutual TLS (its store client certificate against the store's
// --trusted-ca-file and --client-cert-auth), the way a kubeadm control plane runs etcd, and the
// store serves those connections with its lean transport, not by handing them to tonic.
func TestKubeAPIServerOverMutualTLS(t *testing.T) {
	bd, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckBins(bd, cluster.StoreMeganode); err != nil {
		t.Fatalf("needs the binaries `make build k8s-bins` makes: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: filepath.Join(t.TempDir(), "cluster"), Store: cluster.StoreMeganode,
		StoreShards: 1, BinDir: bd, StoreTLS: true})
	if st != nil {
		defer func() { _ = st.Down(10*time.Second, nil) }()
	}
	if err != nil {
		t.Fatalf("up --store-tls: %v", err)
	}
	url := st.Shards[0].URL
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("store URL %s: want https", url)
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "over-mtls"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create through kube-apiserver: %v", err)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "over-mtls", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("get through kube-apiserver: %v %v", got, err)
	}

	// The object is in the store, read over mutual TLS with kube-apiserver's certificate.
	pki := cluster.PKIIn(filepath.Join(st.Dir, "pki"))
	tlsCfg, err := pki.StoreClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(ctx, "/registry/configmaps/default/over-mtls")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the configmap's key in the store: %v %v", r, err)
	}

	// Without a client certificate the store refuses the connection.
	anonCfg := &tls.Config{RootCAs: tlsCfg.RootCAs, MinVersion: tls.VersionTLS12}
	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: anonCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = anon.Get(actx, "/registry/configmaps/default/over-mtls")
		acancel()
		anon.Close()
	}
	if err == nil {
		t.Errorf("a client without a certificate read from the store")
	}

	// kube-apiserver's connections were the lean transport's.
	var metrics string
	for _, c := range st.Components {
		if c.Name == "store" {
			resp, err := http.Get(c.MetricsURL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics = string(b)
		}
	}
	const lean = `meganode_client_connections_total{transport="lean",tls="true"} `
	i := strings.Index(metrics, lean)
	if i < 0 {
		t.Fatalf("no %s in the store's metrics", lean)
	}
	if n := strings.Fields(metrics[i+len(lean):])[0]; n == "0" {
		t.Errorf("no TLS connection was served by the lean transport (%s0)", lean)
	}
}
