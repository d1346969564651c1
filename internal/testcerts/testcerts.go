// Package testcerts generates a throw-away certificate authority with a server and a
// client certificate for loopback TLS and mutual TLS (tests, bench, local clusters).
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/meganode/meganode/internal/pki"
)

// Paths of the PEM files Generate wrote.
type Paths struct {
	Dir        string
	CAFile     string // ca.crt
	CAKeyFile  string // ca.key
	ServerCert string // server.crt (127.0.0.1, ::1, localhost)
	ServerKey  string // server.key
	ClientCert string // client.crt
	ClientKey  string // client.key
}

// Options tune Generate; the zero value is fine.
type Options struct {
	Hosts    []string      // extra server SANs (IPs or DNS names) besides 127.0.0.1, ::1, localhost
	Validity time.Duration // default 24h
	ClientCN string        // default "meganode-client"
}

// Generate writes a CA, a server certificate and a client certificate into dir.
func Generate(dir string) (Paths, error) { return GenerateWith(dir, Options{}) }

// GenerateWith is Generate with options.
func GenerateWith(dir string, o Options) (Paths, error) {
	if o.Validity == 0 {
		o.Validity = 24 * time.Hour
	}
	if o.ClientCN == "" {
		o.ClientCN = "meganode-client"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Paths{}, err
	}
	p := Paths{
		Dir:        dir,
		CAFile:     filepath.Join(dir, "ca.crt"),
		CAKeyFile:  filepath.Join(dir, "ca.key"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(o.Validity + time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          pki.Serial(),
		Subject:               pkix.Name{CommonName: "meganode-test-ca", Organization: []string{"meganode"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	if err := pki.WriteCert(p.CAFile, caDER); err != nil {
		return p, err
	}
	if err := pki.WriteKey(p.CAKeyFile, caKey); err != nil {
		return p, err
	}

	srvTmpl := &x509.Certificate{
		SerialNumber: pki.Serial(),
		Subject:      pkix.Name{CommonName: "meganode-store", Organization: []string{"meganode"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		DNSNames:     []string{"localhost"},
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, h)
		}
	}
	if err := issue(srvTmpl, caCert, caKey, p.ServerCert, p.ServerKey); err != nil {
		return p, err
	}
	cliTmpl := &x509.Certificate{
		SerialNumber: pki.Serial(),
		Subject:      pkix.Name{CommonName: o.ClientCN, Organization: []string{"meganode"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(cliTmpl, caCert, caKey, p.ClientCert, p.ClientKey); err != nil {
		return p, err
	}
	return p, nil
}

// ClientTLS returns a tls.Config that trusts the CA and, if withCert, presents the client certificate.
func (p Paths) ClientTLS(withCert bool) (*tls.Config, error) {
	pool, err := p.CAPool()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		c, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// ServerTLS returns a tls.Config for a server; with clientAuth it requires client certificates from the CA.
func (p Paths) ServerTLS(clientAuth bool) (*tls.Config, error) {
	c, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		pool, err := p.CAPool()
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// CAPool loads the CA certificate into a pool.
func (p Paths) CAPool() (*x509.CertPool, error) {
	b, err := os.ReadFile(p.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("testcerts: no certificate in %s", p.CAFile)
	}
	return pool, nil
}

// StoreArgs are the etcd-style flags that make a server use these files. Like etcd, a server
// given --trusted-ca-file demands client certificates, so the CA is passed only with clientCertAuth.
func (p Paths) StoreArgs(clientCertAuth bool) []string {
	a := []string{"--cert-file", p.ServerCert, "--key-file", p.ServerKey}
	if clientCertAuth {
		a = append(a, "--trusted-ca-file", p.CAFile, "--client-cert-auth")
	}
	return a
}

// PeerArgs are etcd's peer TLS flags with the server certificate (it carries
// client use too, as a member's peer certificate must: it dials its peers
// with it): every peer's certificate required and checked against the CA.
func (p Paths) PeerArgs() []string {
	return []string{"--peer-cert-file", p.ServerCert, "--peer-key-file", p.ServerKey, "--peer-trusted-ca-file", p.CAFile, "--peer-client-cert-auth"}
}

func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := pki.WriteCert(certPath, der); err != nil {
		return err
	}
	return pki.WriteKey(keyPath, k)
}
