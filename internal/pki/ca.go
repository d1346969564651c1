package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Validity of what NewCA and Issue create.
const Validity = 365 * 24 * time.Hour

// CA is a certificate authority: its certificate and key in memory (and as PEM files).
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed ECDSA P-256 CA valid for a year and writes it to certPath and keyPath.
func NewCA(cn, certPath, keyPath string) (*CA, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	t := &x509.Certificate{
		SerialNumber: Serial(), Subject: pkix.Name{CommonName: cn, Organization: []string{"meganode"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, t, t, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := WriteCert(certPath, der); err != nil {
		return nil, err
	}
	if err := WriteKey(keyPath, k); err != nil {
		return nil, err
	}
	return &CA{Cert: c, Key: k}, nil
}

// LoadCA reads a CA NewCA wrote (a PEM certificate and a PKCS#8 ECDSA key).
func LoadCA(certPath, keyPath string) (*CA, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, fmt.Errorf("pki: no PEM block in %s or %s", certPath, keyPath)
	}
	c, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kp.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("pki: " + keyPath + " is not an ECDSA key")
	}
	return &CA{Cert: c, Key: ek}, nil
}

// Issue signs t (subject, SANs and extended key usage set by the caller) with a fresh P-256
// key, valid for a year, and writes the certificate and key.
func (c *CA) Issue(t *x509.Certificate, certPath, keyPath string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	t.SerialNumber = Serial()
	t.NotBefore, t.NotAfter = now.Add(-time.Hour), now.Add(Validity)
	t.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, t, c.Cert, &k.PublicKey, c.Key)
	if err != nil {
		return fmt.Errorf("issue %s: %w", t.Subject.CommonName, err)
	}
	if err := WriteCert(certPath, der); err != nil {
		return err
	}
	return WriteKey(keyPath, k)
}

// ServingTemplate is a server-auth certificate template for hosts (IP addresses or DNS names).
func ServingTemplate(cn string, hosts ...string) *x509.Certificate {
	t := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			t.IPAddresses = append(t.IPAddresses, ip)
		} else {
			t.DNSNames = append(t.DNSNames, h)
		}
	}
	return t
}
