package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/testcerts"
)

// TestGatewayJSONAPI: etcd's gRPC gateway, the JSON API under /v3/ on the client port (`curl -X
// POST http://127.0.0.1:2379/v3/kv/put -d '{"key":"Zm9v","value":"YmFy"}'`). The same HTTP
// requests go to a fresh etcd 3.6 and a fresh store; status, the headers that matter and the
// JSON bodies (compared as values: protojson's spacing is random) must be equal after
// normalising what legitimately differs:
//
//	any "header"            cluster_id, member_id, raft_term -> "N" (when present)
//	Status                  version, storageVersion, leader, raftTerm, raftIndex, raftAppliedIndex,
//	                        dbSize, dbSizeInUse, dbSizeQuota -> "N" (when present)
//	MemberList              ID, name, peerURLs, clientURLs -> "N"
//	Authenticate            token -> "N"
//	LeaseTimeToLive         TTL (remaining) -> "N"
//	an error's message      protojson's position "(line L:C)" dropped (the store does not track
//	                        positions inside the body), its random no-break space after "proto:"
//
// Covered: put (prev_kv, lease, ignore_value), range with every option, a txn with each compare
// target and each op kind (nested txn too) in both branches, deleterange with prev_kv, compaction
// and the compacted / future revision errors, lease grant / ttl / leases / revoke and its
// kv/lease alias, status, alarm, hashkv, member list, the auth flow through the Authorization
// header (user, role, grant, enable, authenticate, permission denied, invalid token, disable),
// bad JSON, a missing key, a request too large, unknown paths and methods, the /v3beta/ prefix,
// a CORS preflight, Lock and Election, and the streams (watch from a past revision, keepalive).
func TestGatewayJSONAPI(t *testing.T) {
	seen := transcripts{}
	forEachDedicated(t, serverOpts{NoClient: true}, func(t *testing.T, tg *target) {
		g := &gw{t: t, base: "http://" + tg.Endpoint}
		g.run()
		seen[tg.Kind] = g.out
	})
	seen.compare(t)
}

// TestGatewayOverMutualTLS: with --client-cert-auth and auth on, etcd refuses a gateway request
// whose client certificate names a common name (its gateway would drop the name: the request
// would not run as that user), plain text 400; before auth is on, and outside /v3/, it serves.
func TestGatewayOverMutualTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	must(t, "certs", err)
	withCert, err := certs.ClientTLS(true)
	must(t, "client tls", err)
	seen := transcripts{}
	forEachDedicated(t, serverOpts{Certs: &certs, ClientCertAuth: true, NoClient: true}, func(t *testing.T, tg *target) {
		tr := &http.Transport{TLSClientConfig: withCert, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		g := &gw{t: t, base: "https://" + tg.Endpoint, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
		g.post("/v3/kv/put", `{"key":"`+b64("k")+`","value":"`+b64("v")+`"}`)
		g.want(200)
		g.post("/v3/auth/user/add", `{"name":"root","password":"rootpw"}`)
		g.post("/v3/auth/role/add", `{"name":"root"}`)
		g.post("/v3/auth/user/grant", `{"user":"root","role":"root"}`)
		g.post("/v3/auth/enable", ``)
		g.want(200)
		g.post("/v3/kv/range", `{"key":"`+b64("k")+`"}`)
		g.want(400)
		g.post("/v3/auth/authenticate", `{"name":"root","password":"rootpw"}`)
		g.post("/v3beta/kv/range", `{"key":"`+b64("k")+`"}`)
		g.do(http.MethodOptions, "/v3/kv/range", ``)
		g.do(http.MethodGet, "/health", ``)
		g.want(200)
		seen[tg.Kind] = g.out
	})
	seen.compare(t)
}

type gw struct {
	t      *testing.T
	base   string
	client *http.Client // nil: http.DefaultClient
	token  string       // sent as Authorization when set
	out    []string
	last   int // the last answer's HTTP status
}

// want fails the test unless the last answer had this status: the steps that must succeed (or
// fail in a given way) on both sides, so that two servers failing alike cannot pass.
func (g *gw) want(status int) {
	g.t.Helper()
	if g.last != status {
		g.t.Errorf("%s: want HTTP %d", g.out[len(g.out)-1], status)
	}
}

func (g *gw) httpClient() *http.Client {
	if g.client != nil {
		return g.client
	}
	return http.DefaultClient
}

// cors is etcd's CORS headers (its default --cors is "*"), which every HTTP answer on the client
// port carries.
func cors(h http.Header) string {
	return strings.Join([]string{h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Allow-Methods"), h.Get("Access-Control-Allow-Headers")}, "; ")
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// post sends one request and records its normalised answer; it returns the parsed body.
func (g *gw) post(path, body string) map[string]any {
	return g.do(http.MethodPost, path, body)
}

func (g *gw) do(method, path, body string) map[string]any {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	must(g.t, path, err)
	if g.token != "" {
		req.Header.Set("Authorization", g.token)
	}
	resp, err := g.httpClient().Do(req)
	must(g.t, path, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(g.t, path, err)
	g.last = resp.StatusCode
	if len(body) > 4096 {
		body = fmt.Sprintf("%s...(%d bytes)", body[:100], len(body))
	}
	var v, parsed map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		g.out = append(g.out, fmt.Sprintf("%s %s %s -> %d ct=%q cors=%q not JSON: %q", method, path, body, resp.StatusCode,
			resp.Header.Get("Content-Type"), cors(resp.Header), raw))
		return nil
	}
	_ = json.Unmarshal(raw, &parsed)
	normGateway(path, v)
	norm, _ := json.Marshal(v)
	g.out = append(g.out, fmt.Sprintf("%s %s %s -> %d ct=%q www-auth=%q cors=%q %s", method, path, body, resp.StatusCode,
		resp.Header.Get("Content-Type"), resp.Header.Get("Www-Authenticate"), cors(resp.Header), norm))
	return parsed
}

// stream sends a streaming request and records its first n lines.
func (g *gw) stream(path, body string, n int) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(body))
	must(g.t, path, err)
	if g.token != "" {
		req.Header.Set("Authorization", g.token)
	}
	resp, err := g.httpClient().Do(req)
	must(g.t, path, err)
	defer resp.Body.Close()
	lines := make(chan string, n)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	start := time.Now()
	rec := fmt.Sprintf("STREAM %s %s -> %d ct=%q cors=%q", path, body, resp.StatusCode, resp.Header.Get("Content-Type"), cors(resp.Header))
	for i := 0; i < n; i++ {
		select {
		case l, ok := <-lines:
			if !ok {
				rec += " | <end>"
				i = n
				continue
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				rec += fmt.Sprintf(" | not JSON %q", l)
				continue
			}
			if r, ok := v["result"].(map[string]any); ok {
				normGateway(path, r)
			}
			norm, _ := json.Marshal(v)
			rec += " | " + string(norm)
		case <-time.After(5 * time.Second):
			rec += " | <timeout>"
			i = n
		}
	}
	g.out = append(g.out, rec)
	if testing.Verbose() {
		g.t.Logf("%s took %v", path, time.Since(start))
	}
}

func normGateway(path string, v map[string]any) {
	anyN := func(m map[string]any, keys ...string) {
		for _, k := range keys {
			if _, ok := m[k]; ok {
				m[k] = "N"
			}
		}
	}
	var walk func(x any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, c := range x {
				if h, ok := c.(map[string]any); ok && k == "header" {
					anyN(h, "cluster_id", "member_id", "raft_term")
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	switch {
	case strings.HasSuffix(path, "/maintenance/status"):
		anyN(v, "version", "storageVersion", "leader", "raftTerm", "raftIndex", "raftAppliedIndex", "dbSize", "dbSizeInUse", "dbSizeQuota")
	case strings.HasSuffix(path, "/cluster/member/list"):
		if ms, ok := v["members"].([]any); ok {
			for _, m := range ms {
				if m, ok := m.(map[string]any); ok {
					anyN(m, "ID", "name", "peerURLs", "clientURLs")
				}
			}
		}
	case strings.HasSuffix(path, "/auth/authenticate"):
		anyN(v, "token")
	case strings.HasSuffix(path, "/lease/timetolive"):
		anyN(v, "TTL")
	}
	if msg, ok := v["message"].(string); ok && strings.HasPrefix(msg, "proto:") {
		msg = strings.Replace(msg, "proto:\u00a0", "proto: ", 1)
		v["message"] = strings.Replace(protoPos.ReplaceAllString(msg, ""), "proto::", "proto:", 1)
	}
}

// protoPos is the position protojson puts in its errors.
var protoPos = regexp.MustCompile(` ?\(line \d+:\d+\)`)

func (g *gw) run() {
	foo, bar := b64("foo"), b64("bar")
	// KV.
	g.post("/v3/kv/put", `{"key":"`+foo+`","value":"`+bar+`"}`)
	g.post("/v3/kv/put", `{"key":"`+foo+`","value":"`+b64("bar2")+`","prev_kv":true}`)
	g.want(200)
	for i, k := range []string{"a/1", "a/2", "a/3", "b"} {
		g.post("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, b64(k), b64(strings.Repeat("v", i+1))))
	}
	g.post("/v3/kv/range", `{"key":"`+foo+`"}`)
	g.post("/v3/kv/range", `{"key":"`+b64("a/")+`","range_end":"`+b64("a0")+`","limit":"2","sort_order":"DESCEND","sort_target":"VALUE"}`)
	g.post("/v3/kv/range", `{"key":"`+b64("a/")+`","rangeEnd":"`+b64("a0")+`","keysOnly":true,"sortOrder":1,"sortTarget":"CREATE"}`)
	g.post("/v3/kv/range", `{"key":"AA==","range_end":"AA==","count_only":true}`)
	g.post("/v3/kv/range", `{"key":"AA==","range_end":"AA==","serializable":true,"revision":"4","min_mod_revision":2,"max_mod_revision":"3"}`)
	g.post("/v3/kv/range", `{"key":"AA==","range_end":"AA==","min_create_revision":"3","max_create_revision":"5","sort_target":"MOD","sort_order":"ASCEND"}`)
	g.post("/v3/kv/range", `{"key":"`+b64("nope")+`"}`)
	g.post("/v3/kv/range", `{"key":"`+foo+`","ignored_unknown_field":1}`)
	// Leases.
	g.post("/v3/lease/grant", `{"TTL":"60","ID":"4660"}`)
	g.post("/v3/lease/grant", `{"TTL":60,"ID":4660}`)
	g.post("/v3/kv/put", `{"key":"`+b64("leased")+`","value":"`+bar+`","lease":"4660"}`)
	g.want(200)
	g.post("/v3/kv/put", `{"key":"`+b64("leased")+`","ignore_value":true,"prev_kv":true}`)
	g.post("/v3/kv/put", `{"key":"`+b64("leased")+`","value":"`+bar+`","ignore_lease":true}`)
	g.post("/v3/lease/timetolive", `{"ID":"4660","keys":true}`)
	g.post("/v3/kv/lease/timetolive", `{"ID":"4660"}`)
	g.post("/v3/lease/leases", ``)
	g.post("/v3/kv/lease/leases", `{}`)
	g.post("/v3/lease/grant", `{"TTL":"60","ID":"4661"}`)
	g.post("/v3/lease/revoke", `{"ID":"4661"}`)
	g.post("/v3/kv/lease/revoke", `{"ID":"4661"}`)
	g.post("/v3/lease/revoke", `{"ID":"4660"}`)
	g.post("/v3/kv/range", `{"key":"`+b64("leased")+`"}`)
	g.stream("/v3/lease/keepalive", `{"ID":"4661"}`, 1)
	// Txn: each compare target, each op kind, both branches.
	cmp := `[{"target":"VERSION","key":"` + foo + `","version":"2"},{"result":"GREATER","target":"CREATE","key":"` + foo + `","create_revision":"1"},` +
		`{"result":"LESS","target":"MOD","key":"` + foo + `","mod_revision":100},{"target":"VALUE","key":"` + foo + `","value":"` + b64("bar2") + `"},` +
		`{"result":"NOT_EQUAL","target":"LEASE","key":"` + foo + `","lease":"99"},{"target":"VERSION","key":"` + b64("a/") + `","range_end":"` + b64("a0") + `","version":"1"}]`
	ops := `[{"request_range":{"key":"` + foo + `"}},{"request_put":{"key":"` + b64("t") + `","value":"` + bar + `","prev_kv":true}},` +
		`{"request_delete_range":{"key":"` + b64("b") + `","prev_kv":true}},{"request_txn":{"compare":[{"target":"VERSION","key":"` + b64("t") + `","version":"1"}],"success":[{"request_range":{"key":"` + b64("t") + `","count_only":true}}]}}]`
	g.post("/v3/kv/txn", `{"compare":`+cmp+`,"success":`+ops+`,"failure":[{"request_range":{"key":"`+foo+`"}}]}`)
	g.post("/v3/kv/txn", `{"compare":[{"target":"VALUE","key":"`+foo+`","value":""}],"success":[],"failure":`+ops+`}`)
	g.post("/v3/kv/txn", `{}`)
	g.post("/v3/kv/txn", `{"success":[{"request_put":{"key":"`+foo+`"}},{"request_put":{"key":"`+foo+`"}}]}`)
	// DeleteRange.
	g.post("/v3/kv/deleterange", `{"key":"`+b64("a/")+`","range_end":"`+b64("a0")+`","prev_kv":true}`)
	g.post("/v3/kv/deleterange", `{"key":"`+b64("none")+`"}`)
	// Maintenance, cluster.
	g.post("/v3/maintenance/status", ``)
	g.post("/v3/maintenance/alarm", `{"action":"GET"}`)
	g.post("/v3/maintenance/hashkv", `{"revision":"0"}`)
	g.post("/v3/cluster/member/list", `{"linearizable":true}`)
	// Watch from a past revision: the created answer, then the history.
	g.stream("/v3/watch", `{"create_request":{"key":"`+foo+`","start_revision":"1","prev_kv":true}}`, 2)
	g.stream("/v3/watch", `{"create_request":{"key":"`+b64("a/")+`","range_end":"`+b64("a0")+`","start_revision":"3","filters":["NOPUT"]}}`, 2)
	// Compaction and its errors.
	g.post("/v3/kv/compaction", `{"revision":"5","physical":true}`)
	g.want(200)
	g.post("/v3/kv/range", `{"key":"`+foo+`","revision":"2"}`)
	g.want(400)
	g.post("/v3/kv/range", `{"key":"`+foo+`","revision":"1000"}`)
	g.post("/v3/kv/compaction", `{"revision":"3"}`)
	g.stream("/v3/watch", `{"create_request":{"key":"`+foo+`","start_revision":"2"}}`, 2)
	// Errors: missing key, bad JSON, bad values, wrong method, unknown path.
	g.post("/v3/kv/put", `{"value":"`+bar+`"}`)
	g.post("/v3/kv/put", `{bad`)
	g.post("/v3/kv/put", `{"key":`)
	g.post("/v3/kv/put", `[]`)
	g.post("/v3/kv/put", `{"key":"`+foo+`","lease":"x"}`)
	g.post("/v3/kv/range", `{"key":"`+foo+`","sort_order":"UP"}`)
	g.post("/v3/lease/revoke", `{"ID":"777"}`)
	g.post("/v3/lease/timetolive", `{"ID":"777"}`)
	g.do(http.MethodGet, "/v3/kv/range", ``)
	g.post("/v3/kv/nope", `{}`)
	g.post("/v3/", `{}`)
	g.do(http.MethodOptions, "/v3/kv/range", ``)
	g.do(http.MethodOptions, "/v3/kv/nope", ``)
	g.post("/v3beta/kv/range", `{"key":"`+foo+`"}`)
	// A put above --max-request-bytes + 512 KiB: gRPC's own refusal, 429.
	g.post("/v3/kv/put", `{"key":"`+b64("big")+`","value":"`+b64(strings.Repeat("x", 2<<20))+`"}`)
	g.want(429)
	// Lock and Election.
	g.post("/v3/lease/grant", `{"TTL":"60","ID":"5000"}`)
	lk := g.post("/v3/lock/lock", `{"name":"`+b64("L")+`","lease":"5000"}`)
	g.want(200)
	key, _ := lk["key"].(string)
	g.post("/v3/lock/unlock", `{"key":"`+key+`"}`)
	g.post("/v3/election/leader", `{"name":"`+b64("E")+`"}`)
	c := g.post("/v3/election/campaign", `{"name":"`+b64("E")+`","lease":"5000","value":"`+b64("v1")+`"}`)
	g.want(200)
	leader, _ := json.Marshal(c["leader"])
	g.post("/v3/election/proclaim", `{"leader":`+string(leader)+`,"value":"`+b64("v2")+`"}`)
	g.post("/v3/election/leader", `{"name":"`+b64("E")+`"}`)
	g.post("/v3/election/resign", `{"leader":`+string(leader)+`}`)
	g.post("/v3/election/proclaim", `{"leader":`+string(leader)+`,"value":"`+b64("v3")+`"}`)
	g.post("/v3/lease/revoke", `{"ID":"5000"}`)
	// Auth through the Authorization header.
	g.post("/v3/auth/status", ``)
	g.post("/v3/auth/user/add", `{"name":"root","password":"rootpw"}`)
	g.post("/v3/auth/role/add", `{"name":"root"}`)
	g.post("/v3/auth/user/grant", `{"user":"root","role":"root"}`)
	g.post("/v3/auth/user/add", `{"name":"u","password":"upw"}`)
	g.post("/v3/auth/role/add", `{"name":"r"}`)
	g.post("/v3/auth/role/grant", `{"name":"r","perm":{"permType":"READ","key":"`+foo+`"}}`)
	g.post("/v3/auth/role/grant", `{"name":"r","perm":{"permType":"READWRITE","key":"`+b64("u/")+`","range_end":"`+b64("u0")+`"}}`)
	g.post("/v3/auth/user/grant", `{"user":"u","role":"r"}`)
	g.post("/v3/auth/user/get", `{"name":"u"}`)
	g.post("/v3/auth/role/get", `{"role":"r"}`)
	g.post("/v3/auth/user/list", `{}`)
	g.post("/v3/auth/role/list", `{}`)
	g.post("/v3/auth/enable", `{}`)
	g.want(200)
	g.post("/v3/kv/range", `{"key":"`+foo+`"}`)
	g.post("/v3/auth/authenticate", `{"name":"u","password":"wrong"}`)
	u := g.post("/v3/auth/authenticate", `{"name":"u","password":"upw"}`)
	root := g.post("/v3/auth/authenticate", `{"name":"root","password":"rootpw"}`)
	tok := func(v map[string]any) string {
		s, _ := v["token"].(string)
		return s
	}
	g.token = tok(u)
	g.post("/v3/kv/range", `{"key":"`+foo+`"}`)
	g.want(200)
	g.post("/v3/kv/put", `{"key":"`+foo+`","value":"`+bar+`"}`)
	g.want(403)
	g.post("/v3/kv/put", `{"key":"`+b64("u/1")+`","value":"`+bar+`"}`)
	g.want(200)
	g.post("/v3/kv/range", `{"key":"`+b64("b")+`"}`)
	g.post("/v3/auth/user/list", `{}`)
	g.stream("/v3/maintenance/snapshot", ``, 1) // root only: the stream fails before its first message
	g.token = "not-a-token"
	g.post("/v3/kv/range", `{"key":"`+foo+`"}`)
	g.want(401)
	g.token = tok(root)
	g.post("/v3/auth/status", ``)
	g.post("/v3/auth/role/revoke", `{"role":"r","key":"`+foo+`"}`)
	g.post("/v3/auth/user/revoke", `{"name":"u","role":"r"}`)
	g.post("/v3/auth/user/delete", `{"name":"u"}`)
	g.post("/v3/auth/role/delete", `{"role":"r"}`)
	g.post("/v3/auth/disable", ``)
	g.want(200)
	g.token = ""
	g.post("/v3/auth/status", ``)
	g.post("/v3/kv/range", `{"key":"`+b64("u/1")+`"}`)
}
