package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// A CA written by NewCA loads back with LoadCA and issues a serving certificate that verifies
// against it for the hosts asked for, and only those.
func TestCAIssuesServingCertificate(t *testing.T) {
	dir := t.TempDir()
	f := func(n string) string { return filepath.Join(dir, n) }
	if _, err := NewCA("test-ca", f("ca.crt"), f("ca.key")); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(f("ca.crt"), f("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue(ServingTemplate("srv", "127.0.0.1", "localhost"), f("srv.crt"), f("srv.key")); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f("srv.crt"), f("srv.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(f("ca.crt"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	for host, ok := range map[string]bool{"127.0.0.1": true, "localhost": true, "10.0.0.1": false} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if (err == nil) != ok {
			t.Errorf("%s: verify error %v, want ok=%v", host, err, ok)
		}
	}
	if st, _ := os.Stat(f("srv.key")); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := LoadCA(f("srv.crt"), f("missing.key")); err == nil {
		t.Error("LoadCA with a missing key: no error")
	}
}
