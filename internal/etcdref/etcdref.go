// Package etcdref runs real etcd (go.etcd.io/etcd/server/v3/embed), the reference
// every meganode-store behaviour is compared with, on free loopback ports.
package etcdref

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/meganode/meganode/internal/storeproc"
)

// Options for one reference server.
type Options struct {
	DataDir         string // default: a new temporary directory (use /dev/shm for etcd's best case)
	MaxRequestBytes uint   // default: etcd's own default (1.5 MiB)
	LogLevel        string // default: "error"
	// Quota of the backend in bytes; 0 keeps etcd's default (2 GiB), negative disables it.
	QuotaBackendBytes int64

	// Client TLS (all optional). With CertFile/KeyFile set the client URL is https.
	CertFile, KeyFile, TrustedCAFile string
	ClientCertAuth                   bool
	// WatchProgressNotifyInterval of periodic watch progress notifications; 0 keeps etcd's 10 minutes.
	WatchProgressNotifyInterval time.Duration
	// ClientPort to listen on (127.0.0.1); 0 picks a free port.
	ClientPort int
	AuthToken  string // etcd's --auth-token ("" keeps etcd's default, simple)
	// AuthTokenTTL is etcd's --auth-token-ttl in seconds (0 keeps etcd's 300).
	AuthTokenTTL uint
	// AutoTLS is etcd's --auto-tls: an https client URL with a self-signed certificate.
	AutoTLS bool

	// A member of a cluster (etcd's --name, --listen-peer-urls, --initial-cluster,
	// --initial-cluster-token); with InitialCluster empty, a single member named etcdref.
	Name           string
	PeerPort       int // 0 picks a free port
	InitialCluster string
	ClusterToken   string
	// ClusterState is etcd's --initial-cluster-state ("" keeps new; "existing" joins a
	// running cluster after MemberAdd).
	ClusterState string
}

// Server is a running embedded etcd.
type Server struct {
	Etcd     *embed.Etcd
	Endpoint string // host:port
	URL      string // scheme://host:port
	DataDir  string
}

// Start runs etcd in this process and waits until it serves clients.
func Start(opts Options) (*Server, error) {
	if opts.DataDir == "" {
		d, err := os.MkdirTemp("", "etcdref-")
		if err != nil {
			return nil, err
		}
		opts.DataDir = d
	}
	cport, err := opts.ClientPort, error(nil)
	if cport == 0 {
		cport, err = storeproc.FreePort()
	}
	if err != nil {
		return nil, err
	}
	pport, err := opts.PeerPort, error(nil)
	if pport == 0 {
		pport, err = storeproc.FreePort()
	}
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdref"
	cfg.Dir = opts.DataDir
	cfg.LogLevel = opts.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	scheme := "http"
	if opts.CertFile != "" {
		scheme = "https"
		cfg.ClientTLSInfo.CertFile = opts.CertFile
		cfg.ClientTLSInfo.KeyFile = opts.KeyFile
		cfg.ClientTLSInfo.TrustedCAFile = opts.TrustedCAFile
		cfg.ClientTLSInfo.ClientCertAuth = opts.ClientCertAuth
	}
	if opts.AutoTLS {
		scheme = "https"
		cfg.ClientAutoTLS = true
	}
	if opts.WatchProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = opts.WatchProgressNotifyInterval
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pport))
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.InitialCluster != "" {
		cfg.Name = opts.Name
		cfg.InitialCluster = opts.InitialCluster
		if opts.ClusterToken != "" {
			cfg.InitialClusterToken = opts.ClusterToken
		}
		if opts.ClusterState != "" {
			cfg.ClusterState = opts.ClusterState
		}
	}
	if opts.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = opts.MaxRequestBytes
	}
	if opts.AuthToken != "" {
		cfg.AuthToken = opts.AuthToken
	}
	if opts.AuthTokenTTL != 0 {
		cfg.AuthTokenTTL = opts.AuthTokenTTL
	}
	if opts.QuotaBackendBytes != 0 {
		cfg.QuotaBackendBytes = opts.QuotaBackendBytes
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 60s")
	}
	// Ready is before the cluster version is applied (a raft entry of its own), and etcd 3.6's
	// Downgrade dereferences that version unchecked: a test calling it first crashed the process.
	for deadline := time.Now().Add(30 * time.Second); e.Server.ClusterVersion() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("etcd has no cluster version after 30s")
		}
	}
	return &Server{Etcd: e, Endpoint: cu.Host, URL: cu.String(), DataDir: opts.DataDir}, nil
}

// Close stops etcd and removes its data directory.
func (s *Server) Close() {
	s.Etcd.Close()
	os.RemoveAll(s.DataDir)
}
