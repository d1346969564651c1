package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/storeproc"
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

// etcd's --auto-tls: an https:// listener without --cert-file serves a self-signed certificate
// (kept in <data-dir>/fixtures/client and reused by the next start); clients skip verification,
// as etcdctl --insecure-skip-tls-verify does with etcd's. Both servers run with the flag.
func TestAutoTLS(t *testing.T) {
	skipVerify := &tls.Config{InsecureSkipVerify: true}
	for _, kind := range kinds() {
		t.Run(kind, func(t *testing.T) {
			var tg *target
			var err error
			if kind == kindEtcd || useEtcdForMeganode() {
				tg, err = startAutoTLSEtcd(t, skipVerify)
			} else {
				tg, err = startAutoTLSStore(skipVerify)
			}
			must(t, "start with --auto-tls", err)
			defer tg.Close()
			ctx := ctxT(t)
			_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/autotls/k"), Value: b("v")})
			must(t, "put over auto TLS", err)
			g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/autotls/k")})
			must(t, "get over auto TLS", err)
			if len(g.Kvs) != 1 {
				t.Errorf("get over auto TLS: %v", g)
			}
			// A client that verifies the certificate against the system roots is refused.
			strict, err := newClient(tg.Endpoint, &tls.Config{})
			must(t, "verifying client", err)
			defer strict.Close()
			c2, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := strict.Get(c2, "/autotls/k"); err == nil {
				t.Errorf("a client verifying the self-signed certificate was served")
			}
		})
	}
}

func startAutoTLSStore(client *tls.Config) (*target, error) {
	bin, err := storeproc.FindBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(shmDir(), "e2e-store-")
	if err != nil {
		return nil, err
	}
	p, err := storeproc.Start(storeproc.Options{Bin: bin, Scheme: "https", DataDir: dir, ExtraArgs: []string{"--auto-tls"}})
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"cert.pem", "key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, "fixtures", "client", f)); err != nil {
			p.Stop()
			return nil, fmt.Errorf("auto-tls left no %s in the data dir: %v", f, err)
		}
	}
	return connected(&target{Kind: kindMeganode, Real: "meganode-store", Proc: p, Endpoint: p.Endpoint}, client)
}

func startAutoTLSEtcd(t *testing.T, client *tls.Config) (*target, error) {
	s, err := etcdref.Start(etcdref.Options{LogLevel: "fatal", DataDir: t.TempDir(), AutoTLS: true})
	if err != nil {
		return nil, err
	}
	return connected(&target{Kind: kindEtcd, Real: "etcd", Etcd: s, Endpoint: s.Endpoint}, client)
}

// Cluster flags asking for what a member cannot do yet (issue 36: keep a local log in a group,
// peer TLS), or that etcd itself refuses, get one line and exit 2 before anything is written to
// the data dir; a member joining a running group (--initial-cluster-state existing) that reaches
// no member gets etcd's error in one line, exit 1, and writes nothing either.
func TestClusterFlagsRefused(t *testing.T) {
	bin, err := storeproc.FindBin()
	if err != nil {
		t.Fatal(err)
	}
	three := "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2381,m2=http://127.0.0.1:2382"
	for _, args := range [][]string{
		{"--name", "m0", "--initial-cluster", "m0=http://127.0.0.1:2380", "--initial-cluster-state", "existing"},
		{"--name", "m9", "--initial-cluster", "m0=http://127.0.0.1:2380"},
		// https peer URLs without peer TLS flags.
		{"--name", "m0", "--initial-cluster", strings.ReplaceAll(three, "http:", "https:")},
		{"--durability", "replicated"},
		// Joining, with no member to ask.
		{"--name", "m0", "--initial-cluster", three, "--initial-cluster-state", "existing"},
	} {
		want := 2
		if args[len(args)-1] == "existing" && len(args) > 4 && args[3] == three {
			want = 1
		}
		dir := t.TempDir()
		// A member that did start would serve until killed: the deadline ends it (and the check fails).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"--data-dir", dir, "--listen-client-urls", "http://127.0.0.1:0"}, args...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != want {
			t.Errorf("%v: want exit %d, got %v\n%s", args, want, err, out)
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "meganode-store: ") {
			t.Errorf("%v: want one line of error, got %q", args, out)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%v: the refused member wrote to its data dir: %v", args, entries)
		}
	}
}
