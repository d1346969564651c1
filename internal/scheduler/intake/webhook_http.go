package intake

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/pki"
	"github.com/meganode/meganode/internal/scheduler/metrics"
)

// WebhookPath is where the validating admission webhook is served.
const WebhookPath = "/intake/pods"

// maxReviewBytes bounds an AdmissionReview body (kube-apiserver's own request limit is 3 MiB).
const maxReviewBytes = 8 << 20

// WebhookHandler is the intake's validating admission webhook (admission.k8s.io/v1). It never
// refuses anything: every well-formed review is answered allowed:true at once. A CREATE of a
// pod that is not a dry run, has no spec.nodeName and names a served spec.schedulerName is
// handed to Take (the intake of the collector the pod hashes to, or a forward to it).
type WebhookHandler struct {
	Names map[string]bool // served spec.schedulerName values
	Take  func(p *corev1.Pod)
	m     *metrics.Counters
}

// NewWebhookHandler serves schedulerNames (comma-separated, as Config.SchedulerName).
func NewWebhookHandler(schedulerNames string, take func(p *corev1.Pod)) *WebhookHandler {
	names := map[string]bool{}
	for _, n := range strings.Split(schedulerNames, ",") {
		names[strings.TrimSpace(n)] = true
	}
	return &WebhookHandler{Names: names, Take: take, m: metrics.For("webhook")}
}

func (h *WebhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	h.m.Add("requests", 1)
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	var review admissionv1.AdmissionReview
	if err == nil && len(body) > maxReviewBytes {
		err = errors.New("body too large")
	}
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err == nil && review.Request == nil {
		err = errors.New("no request in the AdmissionReview")
	}
	if err != nil {
		h.m.Add("bad_requests", 1)
		http.Error(w, "bad AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	h.m.Add(h.take(review.Request), 1)
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
	h.m.Observe("review", time.Since(t0))
}

// take returns what happened to the request (the counter it bumps).
func (h *WebhookHandler) take(req *admissionv1.AdmissionRequest) string {
	switch {
	case req.DryRun != nil && *req.DryRun:
		return "dry_run" // nothing is created: nothing to schedule
	case req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "":
		return "not_pod"
	case req.Operation != admissionv1.Create:
		return "not_create"
	}
	p := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, p); err != nil {
		return "decode_errors"
	}
	if p.Namespace == "" {
		p.Namespace = req.Namespace
	}
	if p.Name == "" {
		p.Name = req.Name
	}
	switch {
	case p.Spec.NodeName != "":
		return "assigned"
	case !h.Names[p.Spec.SchedulerName]:
		return "other_scheduler"
	case p.UID == "" || p.Name == "":
		// Validating admission sees the UID and the generated name; without them the pod
		// cannot be tracked (the reconcile LIST will bring it).
		return "no_uid"
	}
	if h.Take != nil {
		h.Take(p)
	}
	return "offered"
}

// ServeWebhook serves h over HTTPS on addr until ctx ends. Without a certificate and key it
// generates a CA and a serving certificate for 127.0.0.1, ::1, localhost and addr's host, and
// writes the CA bundle to caFile (default: ca.crt in a new temporary directory). It returns the
// listener's address and the CA bundle's path ("" with a given certificate).
func ServeWebhook(ctx context.Context, o WebhookOptions, h http.Handler) (addr, caFile string, err error) {
	certFile, keyFile := o.CertFile, o.KeyFile
	if (certFile == "") != (keyFile == "") {
		return "", "", errors.New("webhook: give both the certificate and the key, or neither")
	}
	if certFile == "" {
		if certFile, keyFile, caFile, err = GenerateWebhookCert(o.Addr, o.CAFile); err != nil {
			return "", "", err
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", "", fmt.Errorf("webhook certificate: %w", err)
	}
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return "", "", err
	}
	mux := http.NewServeMux()
	mux.Handle(WebhookPath, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	return lis.Addr().String(), caFile, nil
}

// GenerateWebhookCert writes a CA and a serving certificate (127.0.0.1, ::1, localhost and the
// host of addr) next to caFile (default: a new temporary directory) through internal/pki.
func GenerateWebhookCert(addr, caFile string) (certFile, keyFile, ca string, err error) {
	dir := filepath.Dir(caFile)
	if caFile == "" {
		if dir, err = os.MkdirTemp("", "meganode-webhook-"); err != nil {
			return "", "", "", err
		}
		caFile = filepath.Join(dir, "ca.crt")
	} else if err = os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host, _, e := net.SplitHostPort(addr); e == nil && host != "" && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	c, err := pki.NewCA("meganode-webhook-ca", caFile, filepath.Join(dir, "webhook-ca.key"))
	if err != nil {
		return "", "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "webhook.crt"), filepath.Join(dir, "webhook.key")
	if err := c.Issue(pki.ServingTemplate("meganode-scheduler-webhook", hosts...), certFile, keyFile); err != nil {
		return "", "", "", err
	}
	return certFile, keyFile, caFile, nil
}
