package secretsbundle

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// A key-rotation of Kubernetes keys keeps the new service-account signing
// key and the new secretbox key in a Secret of its own (type
// v1alpha1.SecretTypeKeyRotation, named by KeysSecretName) from its first
// phase to its end, as a CA rotation keeps its CAs: the bundle's Secret
// takes them when the rotation completes (WithKeys). In between, TalosCluster
// status.kubernetesKeyRotation says the phase and the digest of the new
// keys, recorded before their Secret is written, and Secrets.WithKeys gives
// the keys in force in that phase.

// DefaultEncryptionKeyName is the name Talos gives the bundle's secretbox
// key in kube-apiserver's encryption configuration.
const DefaultEncryptionKeyName = "key2"

// Keys of the key rotation's Secret.
const (
	serviceAccountKeyKey = "service-account.key"
	encryptionNameKey    = "secretbox.name"
	encryptionSecretKey  = "secretbox.secret"
)

// KeysSecretName is the Secret of the new keys while cluster's Kubernetes
// keys rotate.
func KeysSecretName(cluster *v1alpha1.TalosCluster) string {
	return SecretName(cluster) + "-keys-next"
}

// RotationKeys are the new keys of a key rotation: nil for a key it does
// not replace.
type RotationKeys struct {
	// ServiceAccount is the new service-account signing key.
	ServiceAccount *x509.PEMEncodedKey
	// Encryption is the new secretbox key, with the name kube-apiserver
	// will know it by.
	Encryption *render.EncryptionKey
	// Digest is their SHA-256 (KeysDigest), as
	// status.kubernetesKeyRotation.secretDigest records it.
	Digest string
}

// Data is the content of keys's Secret.
func (keys *RotationKeys) Data() map[string][]byte {
	data := map[string][]byte{}
	if keys.ServiceAccount != nil {
		data[serviceAccountKeyKey] = keys.ServiceAccount.Key
	}
	if keys.Encryption != nil {
		data[encryptionNameKey], data[encryptionSecretKey] = []byte(keys.Encryption.Name), []byte(keys.Encryption.Secret)
	}
	return data
}

// KeysDigest is the SHA-256 of the keys in a key rotation's Secret data,
// as RotationDigest is of a CA rotation's.
func KeysDigest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range []string{serviceAccountKeyKey, encryptionNameKey, encryptionSecretKey} {
		fmt.Fprintf(h, "%s %d\n", k, len(data[k]))
		h.Write(data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DecodeRotationKeys reads the keys of a key rotation's Secret data. Its
// errors say what is wrong, to follow the Secret's name, and quote no key
// material.
func DecodeRotationKeys(data map[string][]byte) (*RotationKeys, error) {
	out := &RotationKeys{Digest: KeysDigest(data)}
	if key := data[serviceAccountKeyKey]; len(key) > 0 {
		if _, err := PublicKeyPEM(key); err != nil {
			return nil, errors.New("does not hold a service-account signing key")
		}
		out.ServiceAccount = &x509.PEMEncodedKey{Key: key}
	}
	if name, secret := string(data[encryptionNameKey]), string(data[encryptionSecretKey]); name != "" || secret != "" {
		if raw, err := base64.StdEncoding.DecodeString(secret); err != nil || len(raw) != 32 || !validKeyName(name) {
			return nil, errors.New("does not hold a named secretbox key (the base64 of 32 bytes)")
		}
		out.Encryption = &render.EncryptionKey{Name: name, Secret: secret}
	}
	if out.ServiceAccount == nil && out.Encryption == nil {
		return nil, errors.New("holds no key")
	}
	return out, nil
}

// validKeyName is a name NewRotationKeys gives: key3, key4, …
func validKeyName(name string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "key"))
	return strings.HasPrefix(name, "key") && err == nil && n > 2
}

// NewRotationKeys generates the new keys of a rotation of cluster's
// service-account key if serviceAccount, and of its secretbox key if
// encryption, of the kinds bundle has. The new secretbox key is named
// after the one in force (key2 → key3 → key4 …): data encrypted at rest
// carries its key's name, so no two keys in force share one. They are
// only in memory: the caller records their Digest, then stores them.
func NewRotationKeys(cluster *v1alpha1.TalosCluster, bundle *secrets.Bundle, serviceAccount, encryption bool) (*RotationKeys, error) {
	out := &RotationKeys{}
	if serviceAccount {
		var pemKey []byte
		if b, _ := pem.Decode(bundle.Certs.K8sServiceAccount.Key); b != nil && b.Type == x509.PEMTypeECPrivate {
			k, err := x509.NewECDSAKey()
			if err != nil {
				return nil, fmt.Errorf("generate a service-account key: %w", err)
			}
			pemKey = k.KeyPEM
		} else {
			k, err := x509.NewRSAKey()
			if err != nil {
				return nil, fmt.Errorf("generate a service-account key: %w", err)
			}
			pemKey = k.KeyPEM
		}
		out.ServiceAccount = &x509.PEMEncodedKey{Key: pemKey}
	}
	if encryption {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("generate a secretbox key: %w", err)
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(EncryptionKeyName(cluster), "key"))
		out.Encryption = &render.EncryptionKey{Name: fmt.Sprintf("key%d", max(n, 2)+1), Secret: base64.StdEncoding.EncodeToString(secret)}
	}
	out.Digest = KeysDigest(out.Data())
	return out, nil
}

// EncryptionKeyName is the name kube-apiserver knows cluster's secretbox
// key by.
func EncryptionKeyName(cluster *v1alpha1.TalosCluster) string {
	if n := cluster.Status.SecretsEncryptionKeyName; n != "" {
		return n
	}
	return DefaultEncryptionKeyName
}

// PublicKeyPEM is the PEM public key ("PUBLIC KEY", PKIX) of a PEM
// private key, as KubeServiceAccountConfig accepts it.
func PublicKeyPEM(private []byte) ([]byte, error) {
	b, _ := pem.Decode(private)
	if b == nil {
		return nil, errors.New("not a PEM key")
	}
	var (
		signer crypto.Signer
		err    error
	)
	switch b.Type {
	case x509.PEMTypeRSAPrivate:
		signer, err = stdx509.ParsePKCS1PrivateKey(b.Bytes)
	case x509.PEMTypeECPrivate:
		signer, err = stdx509.ParseECPrivateKey(b.Bytes)
	default:
		var k any
		if k, err = stdx509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
			var ok bool
			if signer, ok = k.(crypto.Signer); !ok {
				err = errors.New("not a signing key")
			}
		}
	}
	if err != nil {
		return nil, errors.New("not a private key") // its error could quote key bytes
	}
	der, err := stdx509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// WithKeys is bundle, encoded as its Secret stores it, with keys in place of
// its service-account key and secretbox key; changed is false when it has
// them already. bundle is not changed.
func WithKeys(bundle *secrets.Bundle, keys *RotationKeys) (data []byte, changed bool, _ error) {
	b := *bundle
	certs, sec := *bundle.Certs, *bundle.Secrets
	b.Certs, b.Secrets = &certs, &sec
	if keys.ServiceAccount != nil && !bytes.Equal(certs.K8sServiceAccount.Key, keys.ServiceAccount.Key) {
		certs.K8sServiceAccount, changed = keys.ServiceAccount, true
	}
	if keys.Encryption != nil && sec.SecretboxEncryptionSecret != keys.Encryption.Secret {
		sec.SecretboxEncryptionSecret, changed = keys.Encryption.Secret, true
	}
	if !changed {
		return nil, false, nil
	}
	data, err := encode(&b)
	if err != nil {
		return nil, false, errors.New("encode the secrets bundle") // its error could quote a value
	}
	return data, true, nil
}

// WithKeys is s with the Kubernetes keys in force in rotation's phase, the
// new keys next (nil: none stored yet, or no rotation), the bundle's
// secretbox key named name: the service-account key that signs (the
// bundle's Certs.K8sServiceAccount) and those accepted besides, and the
// secretbox keys in kube-apiserver's order. s is not changed.
func (s *Secrets) WithKeys(rotation *v1alpha1.KubernetesKeyRotationStatus, next *RotationKeys, name string) (*Secrets, error) {
	out := *s
	if name != "" && name != DefaultEncryptionKeyName && s.Secrets != nil {
		out.EncryptionKeys = []render.EncryptionKey{{Name: name, Secret: s.Secrets.SecretboxEncryptionSecret}}
	}
	if rotation == nil || next == nil {
		return &out, nil
	}
	b := *s.Bundle
	certs := *s.Certs
	b.Certs = &certs
	out.Bundle = &b
	if n := next.ServiceAccount; n != nil && !bytes.Equal(certs.K8sServiceAccount.Key, n.Key) {
		old := certs.K8sServiceAccount
		issuing, accepted := n, old
		if rotation.Phase == v1alpha1.CARotationAcceptNew {
			issuing, accepted = old, n
		}
		certs.K8sServiceAccount = issuing
		if rotation.Phase != v1alpha1.CARotationDropOld {
			pub, err := PublicKeyPEM(accepted.Key)
			if err != nil {
				return nil, fmt.Errorf("the service-account key accepted in phase %s: %w", rotation.Phase, err)
			}
			out.ServiceAccountAccepted = [][]byte{pub}
		}
	}
	if n := next.Encryption; n != nil {
		old := render.EncryptionKey{Name: name, Secret: s.Secrets.SecretboxEncryptionSecret}
		if old.Name == "" {
			old.Name = DefaultEncryptionKeyName
		}
		switch {
		case old.Secret == n.Secret || rotation.Phase == v1alpha1.CARotationDropOld:
			out.EncryptionKeys = []render.EncryptionKey{*n}
		case rotation.Phase == v1alpha1.CARotationIssueNew:
			out.EncryptionKeys = []render.EncryptionKey{*n, old}
		default:
			out.EncryptionKeys = []render.EncryptionKey{old, *n}
		}
	}
	return &out, nil
}
