package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// AdminHTTPClient is an HTTPS client with the admin certificate, trusting the cluster CA.
func AdminHTTPClient(st *State) (*http.Client, error) {
	pkiDir := st.Dir + "/pki"
	cert, err := tls.LoadX509KeyPair(pkiDir+"/admin.crt", pkiDir+"/admin.key")
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(pkiDir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 4,
	}}, nil
}

// insecureClient checks /healthz of components serving a self-signed certificate.
var insecureClient = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health checks of self-signed servers
}}

func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}

// waitHealthy polls url until it answers 200, the component exits, or timeout passes.
func waitHealthy(ctx context.Context, c *Component, client *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if !c.Alive() {
			return fmt.Errorf("%s exited; last lines of %s:\n%s", c.Name, c.Log, tail(c.Log, 20))
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		code, body, err := get(cctx, client, url)
		cancel()
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("HTTP %d: %s", code, strings.TrimSpace(body))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not healthy at %s after %s: %s\nlast lines of %s:\n%s", c.Name, url, timeout, last, c.Log, tail(c.Log, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Health checks every component once and returns a line per component.
func Health(ctx context.Context, st *State) (map[string]string, bool) {
	out := map[string]string{}
	ok := true
	admin, err := AdminHTTPClient(st)
	for i := range st.Components {
		c := &st.Components[i]
		status := "ok"
		switch {
		case !c.Alive():
			status = "not running"
		case c.Kind == BinAPIServer:
			if err != nil {
				status = err.Error()
				break
			}
			if code, body, e := get(ctx, admin, c.URL+"/readyz"); e != nil || code != 200 {
				status = fmt.Sprintf("readyz: %v %d %s", e, code, strings.TrimSpace(body))
			}
		case c.Kind == BinCM || c.Kind == BinScheduler || c.Kind == KindMeganodeScheduler:
			if code, _, e := get(ctx, insecureClient, c.URL+"/healthz"); e != nil || code != 200 {
				status = fmt.Sprintf("healthz: %v %d", e, code)
			}
		case c.Kind == BinKwok || c.Kind == BinKubemark:
			if code, _, e := get(ctx, insecureClient, c.URL+"/healthz"); e != nil || code != 200 {
				status = fmt.Sprintf("healthz: %v %d", e, code)
			}
		}
		if status != "ok" {
			ok = false
		}
		out[c.Name] = status
	}
	return out, ok
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
