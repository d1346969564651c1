// Package e2e runs the real meganode-store binary and real etcd (embedded) side by side and
// checks, with the official Go client, that the store behaves like etcd.
//
// Environment:
//
//	MEGANODE_STORE_BIN      the store binary (default: <repo>/bin/meganode-store, see internal/storeproc)
//	MEGANODE_E2E_TARGET     "" (default): the "meganode" subtests run the real binary;
//	                        "etcd": they run a second embedded etcd instead (validates the harness itself)
//	MEGANODE_E2E_ONLY       "etcd" or "meganode": run only that side's subtests
//	MEGANODE_DIFF_OPS       total operations of the differential test (default 24000, over >= 4 seeds)
//	MEGANODE_DIFF_SEEDS     comma-separated seeds for the differential test (default 1,2,3,4)
//	MEGANODE_STORE_LOG      "1": copy the store's stderr to the test output
package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/storeproc"
	"github.com/meganode/meganode/internal/testcerts"
)

const (
	kindEtcd     = "etcd"
	kindMeganode = "meganode"
)

// target is one server under test with a client connected to it.
type target struct {
	Kind     string // kindEtcd or kindMeganode (the side it plays)
	Real     string // what really runs: "etcd" or "meganode-store"
	Endpoint string
	Cli      *clientv3.Client
	KV       pb.KVClient
	Watch    pb.WatchClient
	Lease    pb.LeaseClient
	Maint    pb.MaintenanceClient
	Cluster  pb.ClusterClient

	Proc *storeproc.Proc // set when Real == meganode-store
	Etcd *etcdref.Server // set when Real == etcd
}

// serverOpts describe a dedicated server; the zero value is a plain loopback server.
type serverOpts struct {
	MaxRequestBytes uint
	Certs           *testcerts.Paths
	ClientCertAuth  bool
	ProgressNotify  time.Duration // periodic watch progress notify interval (etcd flag --watch-progress-notify-interval)
	ClientTLS       *tls.Config   // TLS config of the connected client (with Certs)
	NoClient        bool          // start only the server
	QuotaBytes      int64         // --quota-backend-bytes; 0 keeps the server's default
	AuthToken       string        // --auth-token; "" keeps the server's default (simple)
	AuthTokenTTL    uint          // --auth-token-ttl in seconds; 0 keeps the server's default (300)
	ExtraStoreArgs  []string      // more store flags (the etcd side ignores them)
}

func useEtcdForMeganode() bool { return os.Getenv("MEGANODE_E2E_TARGET") == "etcd" }

// startServer starts a new server of the given kind; the caller closes it.
func startServer(kind string, o serverOpts) (*target, error) {
	tg := &target{Kind: kind}
	var scheme = "http"
	if o.Certs != nil {
		scheme = "https"
	}
	if kind == kindEtcd || useEtcdForMeganode() {
		eo := etcdref.Options{LogLevel: "fatal", MaxRequestBytes: o.MaxRequestBytes, WatchProgressNotifyInterval: o.ProgressNotify,
			QuotaBackendBytes: o.QuotaBytes, AuthToken: o.AuthToken, AuthTokenTTL: o.AuthTokenTTL}
		if dir, err := os.MkdirTemp(shmDir(), "e2e-etcd-"); err == nil {
			eo.DataDir = dir
		}
		if o.Certs != nil {
			eo.CertFile, eo.KeyFile = o.Certs.ServerCert, o.Certs.ServerKey
			if o.ClientCertAuth {
				eo.TrustedCAFile, eo.ClientCertAuth = o.Certs.CAFile, true
			}
		}
		s, err := etcdref.Start(eo)
		if err != nil {
			return nil, fmt.Errorf("start embedded etcd: %w", err)
		}
		tg.Real, tg.Etcd, tg.Endpoint = "etcd", s, s.Endpoint
	} else {
		bin, err := storeproc.FindBin()
		if err != nil {
			return nil, fmt.Errorf("%v\n(the meganode subtests need the store binary: `make store`, or set MEGANODE_STORE_BIN; "+
				"MEGANODE_E2E_TARGET=etcd runs them against a second embedded etcd instead)", err)
		}
		so := storeproc.Options{Bin: bin, Scheme: scheme, ExtraArgs: storeArgs(o)}
		if os.Getenv("MEGANODE_STORE_LOG") == "1" {
			so.Stderr = os.Stderr
		}
		if dir, err := os.MkdirTemp(shmDir(), "e2e-store-"); err == nil {
			so.DataDir = dir
		}
		p, err := storeproc.Start(so)
		if err != nil {
			return nil, fmt.Errorf("start meganode-store %v: %w", so.ExtraArgs, err)
		}
		tg.Real, tg.Proc, tg.Endpoint = "meganode-store", p, p.Endpoint
	}
	if o.NoClient {
		return tg, nil
	}
	return connected(tg, o.ClientTLS)
}

// connected gives tg a client (over tlsCfg when set), or closes it on failure.
func connected(tg *target, tlsCfg *tls.Config) (*target, error) {
	cli, err := newClient(tg.Endpoint, tlsCfg)
	if err != nil {
		tg.Close()
		return nil, err
	}
	tg.setClient(cli)
	return tg, nil
}

// storeArgs are the store's flags for o.
func storeArgs(o serverOpts) []string {
	var args []string
	if o.MaxRequestBytes > 0 {
		args = append(args, "--max-request-bytes", fmt.Sprint(o.MaxRequestBytes))
	}
	if o.QuotaBytes != 0 {
		args = append(args, "--quota-backend-bytes", fmt.Sprint(o.QuotaBytes))
	}
	if o.AuthToken != "" {
		args = append(args, "--auth-token", o.AuthToken)
	}
	if o.AuthTokenTTL != 0 {
		args = append(args, "--auth-token-ttl", fmt.Sprint(o.AuthTokenTTL))
	}
	if o.ProgressNotify > 0 {
		args = append(args, "--watch-progress-notify-interval", o.ProgressNotify.String())
	}
	if o.Certs != nil {
		args = append(args, o.Certs.StoreArgs(o.ClientCertAuth)...)
	}
	return append(args, o.ExtraStoreArgs...)
}

func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return ""
}

func newClient(endpoint string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{endpoint},
		DialTimeout:        5 * time.Second,
		TLS:                tlsCfg,
		MaxCallSendMsgSize: 16 << 20,
		MaxCallRecvMsgSize: 64 << 20,
		Logger:             zap.NewNop(),
	})
}

func (tg *target) setClient(cli *clientv3.Client) {
	tg.Cli = cli
	conn := cli.ActiveConnection()
	tg.KV = pb.NewKVClient(conn)
	tg.Watch = pb.NewWatchClient(conn)
	tg.Lease = pb.NewLeaseClient(conn)
	tg.Maint = pb.NewMaintenanceClient(conn)
	tg.Cluster = pb.NewClusterClient(conn)
}

// Close stops the client and the server.
func (tg *target) Close() {
	if tg.Cli != nil {
		tg.Cli.Close()
	}
	if tg.Etcd != nil {
		tg.Etcd.Close()
	}
	if tg.Proc != nil {
		tg.Proc.Stop()
		os.RemoveAll(tg.Proc.DataDir)
	}
}

// Shared servers, one per side, started on first use and stopped by TestMain.
var (
	sharedMu  sync.Mutex
	shared    = map[string]*target{}
	sharedErr = map[string]error{}
)

func sharedTarget(t testing.TB, kind string) *target {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if tg, ok := shared[kind]; ok {
		return tg
	}
	if err, ok := sharedErr[kind]; ok {
		t.Fatalf("%s: %v", kind, err)
	}
	tg, err := startServer(kind, serverOpts{})
	if err != nil {
		sharedErr[kind] = err
		t.Fatalf("%s: %v", kind, err)
	}
	shared[kind] = tg
	return tg
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, tg := range shared {
		tg.Close()
	}
	os.Exit(code)
}

func kinds() []string {
	switch os.Getenv("MEGANODE_E2E_ONLY") {
	case kindEtcd:
		return []string{kindEtcd}
	case kindMeganode:
		return []string{kindMeganode}
	}
	return []string{kindEtcd, kindMeganode}
}

// forEach runs fn against the shared etcd and the shared meganode-store, as subtests
// "etcd" and "meganode". Keys live under a prefix unique to the test (pfx).
func forEach(t *testing.T, fn func(t *testing.T, tg *target, pfx string)) {
	for _, k := range kinds() {
		t.Run(k, func(t *testing.T) {
			tg := sharedTarget(t, k)
			pfx := "/e2e/" + strings.ReplaceAll(t.Name(), "/", "_") + "/"
			fn(t, tg, pfx)
		})
	}
}

// forEachDedicated is forEach with a fresh server per side started with opts.
func forEachDedicated(t *testing.T, o serverOpts, fn func(t *testing.T, tg *target)) {
	for _, k := range kinds() {
		t.Run(k, func(t *testing.T) {
			tg, err := startServer(k, o)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			defer tg.Close()
			fn(t, tg)
		})
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errCode asserts that err is a gRPC error with the given code and message.
func wantErr(t testing.TB, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: want error %v %q, got success", what, code, msg)
		return
	}
	st := status.Convert(err)
	if st.Code() != code || st.Message() != msg {
		t.Errorf("%s: want error %v %q, got %v %q", what, code, msg, st.Code(), st.Message())
	}
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// curRev is the store's current revision.
func curRev(t testing.TB, tg *target) int64 {
	t.Helper()
	r, err := tg.KV.Range(ctxT(t), &pb.RangeRequest{Key: []byte("/__rev_probe")})
	must(t, "range for revision", err)
	return r.Header.Revision
}

func b(s string) []byte { return []byte(s) }

func prefixEnd(p string) []byte { return []byte(clientv3.GetPrefixRangeEnd(p)) }

func keysOf(kvs []*mvccpbKV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key)
	}
	return out
}

type mvccpbKV = mvccpb.KeyValue

func rpcLeaseNotFound() error { return rpctypes.ErrLeaseNotFound }
