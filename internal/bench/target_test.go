package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/storeproc"
	"github.com/meganode/meganode/internal/testcerts"
)

// TestTargetsOverMutualTLS: with certificates (`bench --tls`) both servers start on https with
// client-certificate auth; the load's connections (with the client certificate) put and read,
// and a connection without the certificate is refused.
func TestTargetsOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts meganode-store and etcd")
	}
	storeBin, meganode := serverBins(t)
	certs, err := testcerts.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{TargetMeganode, TargetEtcd} {
		t.Run(kind, func(t *testing.T) {
			spec := TargetSpec{Kind: kind, StoreBin: storeBin, EtcdCmd: []string{meganode, "etcd"}, TLS: &certs,
				StoreDataRoot: t.TempDir(), EtcdDataRoot: t.TempDir()}
			tg, err := spec.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conns, err := ConnectTLS(ctx, tg.Endpoints, 2, tg.TLS)
			if err != nil {
				t.Fatal(err)
			}
			defer CloseAll(conns)
			if _, err := conns[0].Put(ctx, "k", "v"); err != nil {
				t.Fatal(err)
			}
			if r, err := conns[1].Get(ctx, "k"); err != nil || len(r.Kvs) != 1 {
				t.Fatalf("get: %v %v", r, err)
			}
			anon, err := certs.ClientTLS(false)
			if err != nil {
				t.Fatal(err)
			}
			actx, acancel := context.WithTimeout(ctx, 3*time.Second)
			defer acancel()
			if cs, err := ConnectTLS(actx, tg.Endpoints, 1, anon); err == nil {
				CloseAll(cs)
				t.Errorf("a client without a certificate was served")
			}
		})
	}
}

// serverBins are the store binary and the meganode binary that runs etcd (`meganode etcd`).
func serverBins(t *testing.T) (storeBin, meganode string) {
	t.Helper()
	storeBin, err := storeproc.FindBin()
	if err != nil {
		t.Fatal(err)
	}
	meganode = filepath.Join(filepath.Dir(storeBin), "meganode")
	if _, err := os.Stat(meganode); err != nil {
		t.Fatalf("etcd runs as `meganode etcd`: build bin/meganode (make build): %v", err)
	}
	return storeBin, meganode
}
