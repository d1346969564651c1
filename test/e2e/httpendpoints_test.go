package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestHTTPEndpointsOnClientPort: etcd answers /health, /livez, /readyz, /version and /metrics over
// HTTP on its client port beside gRPC; tools (curl, Prometheus, client libraries' test suites)
// expect them there. Same status, content type, body and CORS headers as etcd (versions
// normalised; OPTIONS answered as a preflight), and the per-RPC counters
// grpc_server_started_total / grpc_server_handled_total move as etcd's do.
func TestHTTPEndpointsOnClientPort(t *testing.T) {
	seen := transcripts{}
	forEach(t, func(t *testing.T, tg *target, p string) {
		var out []string
		version := regexp.MustCompile(`3\.\d+\.\d+`)
		for _, path := range []string{"/health", "/health?exclude=NOSPACE", "/livez", "/livez?verbose", "/readyz", "/readyz?verbose",
			"/readyz?verbose&exclude=non_learner,linearizable_read", "/readyz?verbose&exclude=non_learner&exclude=linearizable_read", "/readyz/data_corruption", "/livez/serializable_read",
			"/readyz/no-such-check", "/version", "/no-such-path"} {
			resp, err := http.Get("http://" + tg.Endpoint + path)
			must(t, "GET "+path, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ct := resp.Header.Get("Content-Type")
			// etcd runs the checks of /readyz in its map's order: compare the lines as a set.
			lines := strings.SplitAfter(string(body), "\n")
			sort.Strings(lines)
			out = append(out, fmt.Sprintf("%s: %d %q %q cors=%q", path, resp.StatusCode, ct, version.ReplaceAllString(strings.Join(lines, ""), "X"), cors(resp.Header)))
		}
		// A CORS preflight: etcd answers OPTIONS on any HTTP path, 200 and empty.
		for _, path := range []string{"/health", "/metrics", "/no-such-path"} {
			req, err := http.NewRequest(http.MethodOptions, "http://"+tg.Endpoint+path, nil)
			must(t, "OPTIONS "+path, err)
			resp, err := http.DefaultClient.Do(req)
			must(t, "OPTIONS "+path, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out = append(out, fmt.Sprintf("OPTIONS %s: %d %q %q cors=%q", path, resp.StatusCode, resp.Header.Get("Content-Type"), body, cors(resp.Header)))
		}

		// The counters, read as the etcd-client crate's suite reads them: HTTP/1.0 on the client port.
		handled := func(method, code string) int64 {
			t.Helper()
			return metric(t, tg.Endpoint, "grpc_server_handled_total", `grpc_code="`+code+`"`, `grpc_method="`+method+`"`)
		}
		started := func(method string) int64 {
			t.Helper()
			return metric(t, tg.Endpoint, "grpc_server_started_total", `grpc_method="`+method+`"`)
		}
		ok0, bad0, st0, w0 := handled("Put", "OK"), handled("Put", "InvalidArgument"), started("Put"), started("Watch")
		ctx := ctxT(t)
		for i := 0; i < 3; i++ {
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "k"), Value: b("v")})
			must(t, "put", err)
		}
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Value: b("v")})
		if err == nil {
			t.Fatalf("put without a key succeeded")
		}
		wctx, cancel := context.WithCancel(ctx)
		wc := tg.Cli.Watch(wctx, p+"w")
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "w"), Value: b("v")})
		must(t, "put watched", err)
		select {
		case <-wc:
		case <-time.After(5 * time.Second):
			t.Fatalf("no watch event")
		}
		cancel()
		out = append(out, fmt.Sprintf("Put OK +%d, InvalidArgument +%d, started +%d; Watch started +%d",
			handled("Put", "OK")-ok0, handled("Put", "InvalidArgument")-bad0, started("Put")-st0, started("Watch")-w0))
		seen[tg.Kind] = out
	})
	seen.compare(t)
}

// metric sums the series of one metric whose line carries every one of labels, from /metrics
// fetched with a bare HTTP/1.0 request on the client port.
func metric(t testing.TB, endpoint, name string, labels ...string) int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	must(t, "dial", err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
	must(t, "write", err)
	var n int64
	found := false
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		all := true
		for _, lb := range labels {
			all = all && strings.Contains(l, lb)
		}
		if !all {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		must(t, "parse "+l, err)
		n += int64(v)
		found = true
	}
	if !found {
		t.Fatalf("%s{%s} not in /metrics", name, strings.Join(labels, ","))
	}
	return n
}
