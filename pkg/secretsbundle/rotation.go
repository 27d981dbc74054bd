package secretsbundle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// A CA rotation keeps the new CAs (of the Talos API, of Kubernetes, or
// both) in a Secret of its own (type v1alpha1.SecretTypeCARotation, named
// by RotationSecretName) from its first phase to its end; the bundle's
// Secret changes only when the rotation completes, when the new CAs are
// written into it (WithCAs) and the rotation's Secret is deleted. In
// between, TalosCluster status.caRotation says which phase the cluster is
// in and the digest of the new CAs, recorded before their Secret is
// written; InForce gives the secrets in force in that phase.

// Keys of the rotation's Secret: each new CA's PEM certificate and key.
const (
	talosCertKey      = "talos.crt"
	talosKeyKey       = "talos.key"
	kubernetesCertKey = "kubernetes.crt"
	kubernetesKeyKey  = "kubernetes.key"
)

// RotationSecretName is the Secret of the new CAs while cluster's CAs
// rotate.
func RotationSecretName(cluster *v1alpha1.TalosCluster) string {
	return SecretName(cluster) + "-ca-next"
}

// RotationCAs are the new CAs of a rotation: nil for a CA it does not
// replace.
type RotationCAs struct {
	Talos, Kubernetes *x509.PEMEncodedCertificateAndKey
	// Digest is their SHA-256 (RotationDigest), as
	// status.caRotation.secretDigest records it.
	Digest string
}

// Data is the content of cas's Secret.
func (cas *RotationCAs) Data() map[string][]byte {
	data := map[string][]byte{}
	if cas.Talos != nil {
		data[talosCertKey], data[talosKeyKey] = cas.Talos.Crt, cas.Talos.Key
	}
	if cas.Kubernetes != nil {
		data[kubernetesCertKey], data[kubernetesKeyKey] = cas.Kubernetes.Crt, cas.Kubernetes.Key
	}
	return data
}

// RotationDigest is the SHA-256 of the CAs in a rotation's Secret data:
// of each key it reads, in a fixed order, its name and length, then its
// bytes, so that no two contents share a digest. Other keys are never
// read, and do not count.
func RotationDigest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range []string{talosCertKey, talosKeyKey, kubernetesCertKey, kubernetesKeyKey} {
		fmt.Fprintf(h, "%s %d\n", k, len(data[k]))
		h.Write(data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DecodeRotationCAs reads the CAs of a rotation's Secret data, each a CA
// certificate with its key. Its errors say what is wrong, to follow the
// Secret's name ("holds no CA"), and quote no key material.
func DecodeRotationCAs(data map[string][]byte) (*RotationCAs, error) {
	out := &RotationCAs{Digest: RotationDigest(data)}
	for _, ca := range []struct {
		dst      **x509.PEMEncodedCertificateAndKey
		crt, key string
		which    string
	}{{&out.Talos, talosCertKey, talosKeyKey, "Talos API"}, {&out.Kubernetes, kubernetesCertKey, kubernetesKeyKey, "Kubernetes"}} {
		if len(data[ca.crt]) == 0 && len(data[ca.key]) == 0 {
			continue
		}
		pair := &x509.PEMEncodedCertificateAndKey{Crt: data[ca.crt], Key: data[ca.key]}
		if _, err := x509.NewCertificateAuthorityFromCertificateAndKey(pair); err != nil {
			// Its errors name no key material.
			return nil, fmt.Errorf("does not hold a %s CA certificate and its key: %w", ca.which, err)
		}
		*ca.dst = pair
	}
	if out.Talos == nil && out.Kubernetes == nil {
		return nil, errors.New("holds no CA")
	}
	return out, nil
}

// NewRotationCAs generates the new CAs of a rotation of cluster's Talos API
// CA if talosCA, and of its Kubernetes CA if kubernetesCA, with machinery
// as talosctl gen secrets does. They are only in memory: the caller
// records their Digest in status.caRotation, then stores them.
func NewRotationCAs(cluster *v1alpha1.TalosCluster, talosCA, kubernetesCA bool, now time.Time) (*RotationCAs, error) {
	out := &RotationCAs{}
	if talosCA {
		next, err := secrets.NewTalosCA(now)
		if err != nil {
			return nil, fmt.Errorf("generate a Talos API CA: %w", err)
		}
		out.Talos = &x509.PEMEncodedCertificateAndKey{Crt: next.CrtPEM, Key: next.KeyPEM}
	}
	if kubernetesCA {
		contract, err := config.ParseContractFromVersion(cluster.Spec.TalosVersion)
		if err != nil {
			return nil, fmt.Errorf("TalosCluster %s/%s talosVersion: %w", cluster.Namespace, cluster.Name, err)
		}
		next, err := secrets.NewKubernetesCA(now, contract)
		if err != nil {
			return nil, fmt.Errorf("generate a Kubernetes CA: %w", err)
		}
		out.Kubernetes = &x509.PEMEncodedCertificateAndKey{Crt: next.CrtPEM, Key: next.KeyPEM}
	}
	out.Digest = RotationDigest(out.Data())
	return out, nil
}
