// Package pki holds the certificate chores shared by the cluster (`meganode up`), the
// scheduler's admission webhook and the test certificates: serial numbers, PEM files, and a
// small ECDSA CA that issues certificates (ca.go).
package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"time"
)

// Serial returns a random positive 120-bit certificate serial number.
func Serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n.Add(n, big.NewInt(1))
}

// WriteCert writes a DER certificate as PEM (world-readable: certificates are public).
func WriteCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// WriteKey writes a private key as PKCS#8 PEM readable by its owner only.
func WriteKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
