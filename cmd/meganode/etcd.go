package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/etcdref"
)

// etcdFlags are the hidden `meganode etcd`'s flags.
type etcdFlags struct {
	dataDir, listen, logLevel string
	quota                     int64
	maxReq, authTTL           uint
	certFile, keyFile, caFile string
	clientCertAuth            bool
	name, peer, cluster       string
	token                     string
}

// newEtcdCmd: `meganode etcd` runs real etcd (v3.6, embedded from its Go modules) as a
// process of its own, so that `meganode bench` can read its CPU time and memory from /proc
// exactly as it does for meganode-store. It is hidden from help and completion.
func newEtcdCmd() *cobra.Command {
	f := &etcdFlags{}
	cmd := &cobra.Command{
		Use:    "etcd",
		Short:  "run the reference etcd (v3.6, embedded) in its own process (used by bench and up --store etcd)",
		Hidden: true,
		Long: `etcd runs real etcd v3.6, embedded from its Go modules, as a process of its own on
--listen-client-urls (http://127.0.0.1:PORT, or https:// with --cert-file and --key-file), so that 'meganode bench' and 'meganode up
--store etcd' can measure its CPU time and memory from /proc as they do for meganode-store.
SIGTERM or SIGINT stops it and keeps the data directory.`,
		Example: `  meganode etcd --data-dir /dev/shm/etcd --listen-client-urls http://127.0.0.1:2379`,
		Args:    noArgs,
		RunE:    action(f, runEtcd),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dataDir, "data-dir", "", "data directory (required; tmpfs for etcd's best case)")
	fs.StringVar(&f.listen, "listen-client-urls", "", "client URL, http://127.0.0.1:PORT or https:// with --cert-file (required)")
	fs.Int64Var(&f.quota, "quota-backend-bytes", 8<<30, "backend quota in bytes (etcd's default is 2 GiB)")
	fs.StringVar(&f.logLevel, "log-level", "error", "etcd log level")
	fs.UintVar(&f.maxReq, "max-request-bytes", 0, "max request size; 0 keeps etcd's 1.5 MiB")
	fs.UintVar(&f.authTTL, "auth-token-ttl", 0, "simple token TTL in seconds; 0 keeps etcd's 300")
	fs.StringVar(&f.certFile, "cert-file", "", "server certificate (PEM) for an https:// URL")
	fs.StringVar(&f.keyFile, "key-file", "", "server key (PEM) for an https:// URL")
	fs.StringVar(&f.caFile, "trusted-ca-file", "", "CA (PEM) that client certificates must chain to")
	fs.BoolVar(&f.clientCertAuth, "client-cert-auth", false, "require a client certificate signed by --trusted-ca-file")
	fs.StringVar(&f.name, "name", "", "member name (with --initial-cluster)")
	fs.StringVar(&f.peer, "listen-peer-urls", "", "peer URL, http://127.0.0.1:PORT (with --initial-cluster)")
	fs.StringVar(&f.cluster, "initial-cluster", "", "NAME=PEER_URL,... of a new cluster this process is one member of")
	fs.StringVar(&f.token, "initial-cluster-token", "", "etcd's --initial-cluster-token (default etcd-cluster)")
	return cmd
}

func runEtcd(ctx context.Context, cmd *cobra.Command, f *etcdFlags) error {
	if f.dataDir == "" || f.listen == "" {
		return usagef("--data-dir and --listen-client-urls are required")
	}
	u, err := url.Parse(f.listen)
	if err != nil {
		return usagef("--listen-client-urls: %v", err)
	}
	scheme := "http"
	if f.certFile != "" || f.keyFile != "" {
		scheme = "https"
	}
	if u.Scheme != scheme || u.Hostname() != "127.0.0.1" {
		return usagef("--listen-client-urls: want %s://127.0.0.1:PORT (https with --cert-file and --key-file), got %s", scheme, f.listen)
	}
	if scheme == "https" && (f.certFile == "" || f.keyFile == "") {
		return usagef("--cert-file and --key-file go together")
	}
	if f.clientCertAuth && f.caFile == "" {
		return usagef("--client-cert-auth needs --trusted-ca-file")
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port <= 0 {
		return usagef("--listen-client-urls: no port in %s", f.listen)
	}
	peerPort := 0
	if f.cluster != "" {
		pu, err := url.Parse(f.peer)
		if f.name == "" || err != nil || pu.Scheme != "http" || pu.Hostname() != "127.0.0.1" {
			return usagef("--initial-cluster needs --name and --listen-peer-urls http://127.0.0.1:PORT")
		}
		if peerPort, err = strconv.Atoi(pu.Port()); err != nil || peerPort <= 0 {
			return usagef("--listen-peer-urls: no port in %s", f.peer)
		}
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return err
	}
	srv, err := etcdref.Start(etcdref.Options{
		Name: f.name, PeerPort: peerPort, InitialCluster: f.cluster, ClusterToken: f.token,
		DataDir: f.dataDir, ClientPort: port, LogLevel: f.logLevel,
		QuotaBackendBytes: f.quota, MaxRequestBytes: f.maxReq, AuthTokenTTL: f.authTTL,
		CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.caFile, ClientCertAuth: f.clientCertAuth,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "etcd %s: ready to serve client requests\n", srv.Endpoint)
	select {
	case <-ctx.Done(): // SIGTERM or SIGINT
		srv.Etcd.Close() // keeps the data directory: it belongs to the caller
		return nil
	case err := <-srv.Etcd.Err():
		srv.Etcd.Close()
		return err
	}
}
