package main

// How `bench apiserver-failover` tells failures apart: the client's errors (client-go's, and
// every HTTP answer under them), and every client's failed requests from kube-apiserver's
// audit log (its metrics carry the code only, and it wraps some store errors in a 409: a
// binding's "Operation cannot be fulfilled … etcdserver: request timed out").

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/meganode/meganode/internal/bench"
)

// podNameRE, nodeNameRE, ipRE match what differs between equal errors (this bench's pod
// names, KWOK's node names, addresses), so that they count together.
var (
	podNameRE  = regexp.MustCompile(`apif-[a-z0-9]+-[0-9]{6}`)
	nodeNameRE = regexp.MustCompile(`kwok-node-[0-9]+`)
	ipRE       = regexp.MustCompile(`[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(:[0-9]+)?`)
)

func normalizeErr(s string) string {
	s = podNameRE.ReplaceAllString(s, "<pod>")
	s = nodeNameRE.ReplaceAllString(s, "<node>")
	s = ipRE.ReplaceAllString(s, "<ip>")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// statusClass is an error answer's class: code, reason (when there is one), message.
func statusClass(code int, reason, msg string) string {
	if reason != "" {
		return normalizeErr(fmt.Sprintf("%d %s: %s", code, reason, msg))
	}
	return normalizeErr(fmt.Sprintf("%d: %s", code, msg))
}

// storeTimedOut: the store's own timeout passed through by kube-apiserver as a 500 with no
// reason — etcd's "request timed out" (ErrTimeout), "…, possibly due to previous leader
// failure" (ErrTimeoutDueToLeaderFail, a write whose leader died before answering), "…, possibly
// due to connection lost" — which client-go does not retry (no Retry-After); its caller does.
func storeTimedOut(msg string) bool { return strings.Contains(msg, "etcdserver: request timed out") }

// classifyErr is a client-go error's class and whether it is a timeout (kube-apiserver's
// Timeout or ServerTimeout, the store's, or the client's deadline).
func classifyErr(err error) (string, bool) {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		to := apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || s.Code == http.StatusGatewayTimeout || storeTimedOut(s.Message)
		return statusClass(int(s.Code), string(s.Reason), s.Message), to
	}
	var ne net.Error
	to := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	return normalizeErr("client: " + err.Error()), to
}

// attemptRecorder records every HTTP request of a clientset but its watches.
type attemptRecorder struct {
	next http.RoundTripper
	log  *callLog
}

func (a *attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return a.next.RoundTrip(req)
	}
	verb, res := requestVerb(req.Method, req.URL.Path)
	start := time.Now()
	resp, err := a.next.RoundTrip(req)
	s := bench.CallSample{Start: start, Dur: time.Since(start), Verb: verb, Resource: res}
	if err != nil {
		var ne net.Error
		s.Err = normalizeErr("transport: " + err.Error())
		s.Timeout = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
		a.log.add(s)
		return resp, err
	}
	s.Code = resp.StatusCode
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		reason, msg := "", strings.TrimSpace(string(b))
		if st, ok := decodeStatus(b); ok {
			reason, msg = string(st.Reason), st.Message
		}
		s.Err = statusClass(resp.StatusCode, reason, msg)
		s.RetryAfter = resp.Header.Get("Retry-After") != ""
		s.Timeout = resp.StatusCode == http.StatusGatewayTimeout || reason == string(metav1.StatusReasonTimeout) ||
			reason == string(metav1.StatusReasonServerTimeout) || storeTimedOut(msg)
	}
	a.log.add(s)
	return resp, nil
}

// decodeStatus decodes an error answer's Status, JSON or protobuf (client-go asks for
// protobuf for built-in types).
func decodeStatus(b []byte) (*metav1.Status, bool) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err == nil {
		if st, ok := obj.(*metav1.Status); ok {
			return st, true
		}
	}
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
		return &st, true
	}
	return nil, false
}

// requestVerb names a request as kube-apiserver's metrics do (verb, resource).
func requestVerb(method, path string) (string, string) {
	p := strings.Split(strings.Trim(path, "/"), "/")
	// /api/v1/[namespaces/NS/]RES[/NAME[/SUB]] or /apis/G/V/…
	i := 2
	if len(p) > 0 && p[0] == "apis" {
		i = 3
	}
	rest := []string{}
	if len(p) > i {
		rest = p[i:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	res, named := "", false
	if len(rest) > 0 {
		res = rest[0]
		named = len(rest) > 1
	}
	verb := method
	if method == http.MethodGet && !named {
		verb = "LIST"
	}
	return verb, res
}

// auditPolicy logs every request once, when its answer is complete, with its metadata (the
// answer's Status among it: code, reason, message).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`

// auditArgs writes the audit policy into dir and answers kube-apiserver's flags to log to
// dir/logs/kube-apiserver-audit.log (batched: no file write on a request's path).
func auditArgs(dir string) ([]string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, "", err
	}
	abs, err := filepath.Abs(filepath.Join(dir, "logs", "kube-apiserver-audit.log"))
	if err != nil {
		return nil, "", err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + abs, "--audit-log-mode=batch", "--audit-log-maxbackup=1"}, abs, nil
}

// auditEvent is what this bench reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *metav1.Status `json:"responseStatus"`
	Received       time.Time      `json:"requestReceivedTimestamp"`
	Answered       time.Time      `json:"stageTimestamp"`
}

// auditFailures reads an audit log for the requests of resources (not /readyz and the like)
// answered with a code ≥ 400 but 404 (a read of what is not there is an answer, not a
// failure): each a sample at its answer's time, its class the client (user agent's name),
// verb, resource, code, reason and message.
func auditFailures(r io.Reader) []bench.CallSample {
	var out []bench.CallSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if !bytes.Contains(b, []byte(`"code":`)) {
			continue
		}
		var ev auditEvent
		if json.Unmarshal(b, &ev) != nil || ev.ResponseStatus == nil || ev.ObjectRef == nil || ev.Stage == "RequestReceived" {
			continue
		}
		st := ev.ResponseStatus
		if st.Code < 400 || st.Code == http.StatusNotFound {
			continue
		}
		res := ""
		if ev.ObjectRef != nil {
			res = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
		}
		client, _, _ := strings.Cut(ev.UserAgent, "/")
		to := st.Code == http.StatusGatewayTimeout || st.Reason == metav1.StatusReasonTimeout || st.Reason == metav1.StatusReasonServerTimeout ||
			storeTimedOut(st.Message)
		out = append(out, bench.CallSample{Start: ev.Received, Dur: ev.Answered.Sub(ev.Received), Verb: strings.ToUpper(ev.Verb), Resource: res,
			Code: int(st.Code), Err: fmt.Sprintf("%s %s %s: %s", client, strings.ToUpper(ev.Verb), res, statusClass(int(st.Code), string(st.Reason), st.Message)),
			Timeout: to})
	}
	return out
}
