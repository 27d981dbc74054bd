// Package pki issues the small X.509 hierarchies Ichor needs on its own: the
// embedded etcd's TLS, and the certificates the integration harness and
// `make run` give to a local control plane.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"ichor.dev/ichor/pkg/atomicfile"
)

// CA is a certificate authority with its key in memory.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
}

// KeyPair is a PEM-encoded certificate and private key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Usage says what a leaf certificate is for.
type Usage int

const (
	// ServerAuth certificates serve TLS.
	ServerAuth Usage = 1 << iota
	// ClientAuth certificates authenticate clients.
	ClientAuth
)

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Usage         Usage
	Validity      time.Duration
}

// NewCA creates a self-signed CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key}, nil
}

// CertPEM returns the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPair returns the CA's own certificate and key in PEM, for components
// that sign with it (a kube-controller-manager's CSR signer).
func (ca *CA) KeyPair() (KeyPair, error) {
	keyPEM, err := encodeKey(ca.key)
	return KeyPair{CertPEM: ca.CertPEM(), KeyPEM: keyPEM}, err
}

// Issue signs a new leaf certificate with a fresh P-256 key.
func (ca *CA) Issue(leaf Leaf) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate key for %q: %w", leaf.CommonName, err)
	}
	validity := leaf.Validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organizations},
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if leaf.Usage&ServerAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.Usage&ClientAuth != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("sign %q: %w", leaf.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// WriteFiles writes the pair as <dir>/<name>.crt and <dir>/<name>.key (mode
// 0600) and returns the two paths. Each file is replaced whole, never rewritten
// in place, so a reader sees the old or the new one and a key never inherits
// an older file's mode.
func (kp KeyPair) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := replaceFile(certFile, kp.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := replaceFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func replaceFile(path string, data []byte, mode os.FileMode) error {
	return atomicfile.WriteFile(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Loopback is the address set a certificate for a local server needs.
var Loopback = struct {
	DNSNames []string
	IPs      []net.IP
}{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("read random serial: %v", err))
	}
	return n
}
