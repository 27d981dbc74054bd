// Package workload is how ichor-controller reaches the Kubernetes API of a
// cluster it manages: client configs signed from the cluster's secrets
// bundle, and the controller's own least-privilege identity there.
package workload

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/rest"
)

// clockSkew backdates certificates so a node whose clock runs a little
// behind accepts them at once.
const clockSkew = time.Minute

// MastersGroup is Kubernetes's group of cluster admins, whom no
// authorizer refuses: the group of Talos's own admin kubeconfig.
const MastersGroup = "system:masters"

// Identity is who a client config authenticates as.
type Identity struct {
	// User is the certificate's common name.
	User string
	// Groups are its organizations.
	Groups []string
}

// ClientConfig returns a config for the Kubernetes API at endpoint (the
// cluster's https URL) that trusts only the bundle's Kubernetes CA, and the
// PEM certificates of alsoTrusted (during a CA rotation, the other CA),
// and authenticates as id with a client certificate signed by the bundle's
// CA, valid from now for ttl. The certificate's key is generated here and
// lives only in the returned config.
func ClientConfig(bundle *secrets.Bundle, endpoint string, id Identity, now time.Time, ttl time.Duration, alsoTrusted ...[]byte) (*rest.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("workload client: generate key: %w", err)
	}
	certPEM, err := SignClientCertificate(bundle, key.Public(), id, now, ttl)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("workload client: encode key: %w", err)
	}
	return &rest.Config{
		Host: endpoint,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   bytes.Join(append([][]byte{bundle.Certs.K8s.Crt}, alsoTrusted...), nil),
			CertData: certPEM,
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
		UserAgent: "ichor-controller",
		// client-go's default of 5 requests a second would have the approver
		// take minutes over a thousand nodes asking at once.
		QPS:   100,
		Burst: 200,
	}, nil
}

// SignClientCertificate certifies pub, whose private half someone else
// holds, as id on the cluster's Kubernetes API, signed by the bundle's
// Kubernetes CA and valid from now for ttl; it returns the PEM certificate.
func SignClientCertificate(bundle *secrets.Bundle, pub crypto.PublicKey, id Identity, now time.Time, ttl time.Duration) ([]byte, error) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.K8s == nil || len(bundle.Certs.K8s.Key) == 0 {
		return nil, errors.New("workload client: the bundle has no Kubernetes CA key")
	}
	ca, err := tls.X509KeyPair(bundle.Certs.K8s.Crt, bundle.Certs.K8s.Key)
	if err != nil {
		return nil, fmt.Errorf("workload client: the bundle's Kubernetes CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("workload client: the bundle's Kubernetes CA certificate: %w", err)
	}
	signer, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("workload client: the bundle's Kubernetes CA key cannot sign")
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("workload client: serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id.User, Organization: id.Groups},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("workload client: sign certificate for %s: %w", id.User, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
