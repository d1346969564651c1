package durability

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/storeproc"
)

// A write held for durability past the caller's deadline (docs/design.md §5, "Past the
// client's deadline"): etcd's server, whose proposal is still waiting when the request's
// context ends, leaves the answer to grpc-go, which resets the stream; a grpc-go client sees
// DeadlineExceeded "context deadline exceeded". The store answers that itself, just before its
// gRPC library would have answered Cancelled "Timeout expired". A grpc-go client's own timer
// usually fires first and hides the server's answer, so the answer is read from a raw HTTP/2
// request that sends grpc-timeout without a timer of its own; then a clientv3 put with a short
// deadline. Each write still becomes durable and visible once its fsync returns, as a proposal
// that timed out in etcd may still be applied.
func TestHeldWritePastDeadline(t *testing.T) {
	const injected = 600 * time.Millisecond
	p, err := storeproc.Start(storeproc.Options{DataDir: filepath.Join(t.TempDir(), "data"),
		ExtraArgs: []string{"--durability=fsync", "--test-fault-fsync-latency=" + injected.String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	cli := client(t, p)
	defer cli.Close()
	bg := context.Background()

	for _, method := range []string{"Put", "Txn"} {
		var msg []byte
		if method == "Put" {
			msg, err = (&etcdserverpb.PutRequest{Key: []byte("/registry/pods/ns/raw-put"), Value: []byte("v")}).Marshal()
		} else {
			msg, err = (&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{
				RequestPut: &etcdserverpb.PutRequest{Key: []byte("/registry/pods/ns/raw-txn"), Value: []byte("v")}}}}}).Marshal()
		}
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		code, text := rawCall(t, p.Endpoint, "/etcdserverpb.KV/"+method, msg, "150m")
		took := time.Since(t0)
		t.Logf("%s held for a %v fsync with grpc-timeout 150m: grpc-status %d %q after %v", method, injected, code, text, took.Round(time.Millisecond))
		if code != uint32(codes.DeadlineExceeded) || text != "context deadline exceeded" {
			t.Errorf("%s past its deadline: want grpc-status %d %q, got %d %q", method, codes.DeadlineExceeded, "context deadline exceeded", code, text)
		}
		if took > injected-100*time.Millisecond {
			t.Errorf("%s past its deadline answered after %v: not at its deadline", method, took)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
	_, err = cli.Put(ctx, "/registry/pods/ns/client", "v")
	cancel()
	// clientv3 returns its context's error (context.DeadlineExceeded) when that has ended.
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("clientv3 put past its deadline: want DeadlineExceeded, got %v", err)
	}
	// Committed all the same: durable and visible once the fsync returns.
	time.Sleep(2 * injected)
	for _, k := range []string{"/registry/pods/ns/raw-put", "/registry/pods/ns/raw-txn", "/registry/pods/ns/client"} {
		if g, err := cli.Get(bg, k); err != nil || len(g.Kvs) != 1 {
			t.Errorf("%s after its fsync: %v %v", k, g, err)
		}
	}
}

// rawCall sends one unary gRPC request over h2c with the given grpc-timeout and no deadline of
// its own, and returns the grpc-status and grpc-message the server answered.
func rawCall(t *testing.T, endpoint, path string, msg []byte, timeout string) (uint32, string) {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	frame := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
	copy(frame[5:], msg)
	req, err := http.NewRequest(http.MethodPost, "http://"+endpoint+path, bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	req.Header.Set("grpc-timeout", timeout)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		// A reset stream (what grpc-go's server sends): a grpc-go client maps it to
		// DeadlineExceeded once its own deadline has passed.
		t.Logf("%s: body: %v", path, err)
		return uint32(codes.Canceled), "stream reset: " + err.Error()
	}
	get := func(k string) string {
		if v := resp.Trailer.Get(k); v != "" {
			return v
		}
		return resp.Header.Get(k) // a trailers-only answer
	}
	code, err := strconv.ParseUint(get("grpc-status"), 10, 32)
	if err != nil {
		t.Fatalf("%s: grpc-status %q: %v", path, get("grpc-status"), err)
	}
	text, err := url.PathUnescape(get("grpc-message")) // gRPC percent-encodes the message
	if err != nil {
		t.Fatalf("%s: grpc-message %q: %v", path, get("grpc-message"), err)
	}
	return uint32(code), text
}
