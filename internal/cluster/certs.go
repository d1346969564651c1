package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/meganode/meganode/internal/pki"
	"github.com/meganode/meganode/internal/testcerts"
)

// PKI is every certificate and key the control plane uses, as files in one directory:
// a cluster CA (apiserver serving cert and the client certs of admin, controller-manager,
// scheduler and KWOK), a separate front-proxy CA (kube-apiserver 1.36 refuses a
// requestheader CA that overlaps the client CA) and the service-account signing key.
type PKI struct {
	Dir string

	CACert, CAKey            string
	FrontProxyCA             string
	FrontProxyCert, ProxyKey string
	ServerCert, ServerKey    string
	AdminCert, AdminKey      string
	CMCert, CMKey            string
	SchedCert, SchedKey      string
	SAKey, SAPub             string
	// The stores' serving certificate and kube-apiserver's client certificate for them
	// (`up --store-tls`: mutual TLS between kube-apiserver and its stores, as in kubeadm).
	StoreCert, StoreKey             string
	StoreClientCert, StoreClientKey string
}

// FrontProxyClientName is the CN the apiserver accepts on requestheader (aggregation) requests.
const FrontProxyClientName = "front-proxy-client"

// PKIIn names the files of the PKI GeneratePKI writes into dir.
func PKIIn(dir string) *PKI {
	f := func(n string) string { return filepath.Join(dir, n) }
	return &PKI{Dir: dir,
		CACert: f("ca.crt"), CAKey: f("ca.key"),
		FrontProxyCA:   f("front-proxy-ca.crt"),
		FrontProxyCert: f("front-proxy-client.crt"), ProxyKey: f("front-proxy-client.key"),
		ServerCert: f("apiserver.crt"), ServerKey: f("apiserver.key"),
		AdminCert: f("admin.crt"), AdminKey: f("admin.key"),
		CMCert: f("controller-manager.crt"), CMKey: f("controller-manager.key"),
		SchedCert: f("scheduler.crt"), SchedKey: f("scheduler.key"),
		SAKey: f("sa.key"), SAPub: f("sa.pub"),
		StoreCert: f("store.crt"), StoreKey: f("store.key"),
		StoreClientCert: f("apiserver-store-client.crt"), StoreClientKey: f("apiserver-store-client.key"),
	}
}

// GeneratePKI writes a fresh PKI into dir (valid for a year).
func GeneratePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := PKIIn(dir)
	clusterCA, err := pki.NewCA("meganode-ca", p.CACert, p.CAKey)
	if err != nil {
		return nil, err
	}
	fpCA, err := pki.NewCA("meganode-front-proxy-ca", p.FrontProxyCA, filepath.Join(dir, "front-proxy-ca.key"))
	if err != nil {
		return nil, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	if err := clusterCA.Issue(server, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	store := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "meganode-store"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		DNSNames:    []string{"localhost"},
	}
	if err := clusterCA.Issue(store, p.StoreCert, p.StoreKey); err != nil {
		return nil, err
	}
	clients := []struct {
		cn, org  string
		crt, key string
		signer   *pki.CA
	}{
		{"meganode-admin", "system:masters", p.AdminCert, p.AdminKey, clusterCA},
		{"system:kube-controller-manager", "", p.CMCert, p.CMKey, clusterCA},
		{"system:kube-scheduler", "", p.SchedCert, p.SchedKey, clusterCA},
		{FrontProxyClientName, "", p.FrontProxyCert, p.ProxyKey, fpCA},
		{"kube-apiserver-store-client", "", p.StoreClientCert, p.StoreClientKey, clusterCA},
	}
	for _, c := range clients {
		t := &x509.Certificate{Subject: pkix.Name{CommonName: c.cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if c.org != "" {
			t.Subject.Organization = []string{c.org}
		}
		if err := c.signer.Issue(t, c.crt, c.key); err != nil {
			return nil, err
		}
	}
	// Service-account token signing key (ES256).
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteKey(p.SAKey, k); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// WriteKubeconfig writes a kubeconfig for server authenticated by a client certificate.
func WriteKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: meganode
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: meganode
  context:
    cluster: meganode
    user: %s
current-context: meganode
`, server, caFile, user, certFile, keyFile, user)
	return os.WriteFile(path, []byte(s), 0o600)
}

// StoreClientTLS is the TLS a client of `up --store-tls` stores uses: the cluster CA as root,
// kube-apiserver's store client certificate.
func (p *PKI) StoreClientTLS() (*tls.Config, error) {
	return testcerts.Paths{CAFile: p.CACert, ClientCert: p.StoreClientCert, ClientKey: p.StoreClientKey}.ClientTLS(true)
}
