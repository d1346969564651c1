package e2e

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/testcerts"
)

func TestTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	must(t, "certs", err)
	tlsCfg, err := certs.ClientTLS(false)
	must(t, "client tls", err)
	forEachDedicated(t, serverOpts{Certs: &certs, ClientTLS: tlsCfg}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/tls/k"), Value: b("v")})
		must(t, "put over TLS", err)
		g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/tls/k")})
		must(t, "get over TLS", err)
		if len(g.Kvs) != 1 {
			t.Errorf("get over TLS: %v", g)
		}
		ml, err := tg.Cluster.MemberList(ctx, &pb.MemberListRequest{})
		must(t, "member list", err)
		if len(ml.Members) != 1 || len(ml.Members[0].ClientURLs) == 0 || ml.Members[0].ClientURLs[0] != "https://"+tg.Endpoint {
			t.Errorf("member list over TLS: %v (want client url https://%s)", ml, tg.Endpoint)
		}
		requireLeanTLS(t, tg)
		// a plaintext client gets nowhere
		plain, err := newClient(tg.Endpoint, nil)
		must(t, "plain client", err)
		defer plain.Close()
		c2, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := plain.Get(c2, "/tls/k"); err == nil {
			t.Errorf("plaintext client read from a TLS server")
		}
	})
}

func TestMutualTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	must(t, "certs", err)
	withCert, err := certs.ClientTLS(true)
	must(t, "client tls", err)
	noCert, err := certs.ClientTLS(false)
	must(t, "client tls", err)
	forEachDedicated(t, serverOpts{Certs: &certs, ClientCertAuth: true, ClientTLS: withCert}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/mtls/k"), Value: b("v")})
		must(t, "put with client certificate", err)
		// watch and lease streams work too
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		wc := tg.Cli.Watch(wctx, "/mtls/", clientv3.WithPrefix())
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/mtls/w"), Value: b("v")})
		must(t, "put", err)
		if r := <-wc; len(r.Events) != 1 {
			t.Errorf("watch over mTLS: %v %v", r.Events, r.Err())
		}
		// without a client certificate: refused
		anon, err := newClient(tg.Endpoint, noCert)
		if err == nil {
			defer anon.Close()
			c2, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, err := anon.Get(c2, "/mtls/k"); err == nil {
				t.Errorf("client without a certificate was served under --client-cert-auth")
			}
		}
		// a certificate from another CA: refused
		other, err := testcerts.Generate(t.TempDir())
		must(t, "other certs", err)
		otherCfg, err := other.ClientTLS(true)
		must(t, "other tls", err)
		otherCfg.RootCAs, _ = certs.CAPool()
		foreign, err := newClient(tg.Endpoint, otherCfg)
		if err == nil {
			defer foreign.Close()
			c3, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, err := foreign.Get(c3, "/mtls/k"); err == nil {
				t.Errorf("client with a certificate from an unknown CA was served")
			}
		}
		// and the server still serves the good client
		_, err = tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/mtls/k")})
		must(t, "get after refused clients", err)
		requireLeanTLS(t, tg)
	})
}

// requireLeanTLS: the store served the client's HTTP/2 over TLS with its lean transport (the
// path the hot calls are fast on), not by handing the connection to tonic. No-op for etcd.
func requireLeanTLS(t *testing.T, tg *target) {
	t.Helper()
	if tg.Proc == nil {
		return
	}
	m := storeMetrics(t, tg)
	if m[`meganode_client_connections_total{transport="lean",tls="true"}`] < 1 {
		t.Errorf("no TLS connection was served by the lean transport: lean %v, tonic %v",
			m[`meganode_client_connections_total{transport="lean",tls="true"}`], m[`meganode_client_connections_total{transport="tonic",tls="true"}`])
	}
}
