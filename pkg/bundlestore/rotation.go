package clustersecrets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// A CA rotation keeps the new CAs (of the Talos API, of Kubernetes, or
// both) in a Secret of its own (type v1alpha1.SecretTypeCARotation, named
// by RotationSecretName) from its first phase to its end; the bundle's
// Secret changes only when the rotation completes, when the new CAs are
// written into it (StoreCAs) and the rotation's Secret is deleted. In
// between, TalosCluster status.caRotation says which phase the cluster is
// in and the digest of the new CAs, recorded before their Secret is
// written, and Load gives everyone the secrets in force in it. A Secret of
// that name holding other CAs is never used, nor deleted.

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
	// Digest is their SHA-256 (rotationDigest), as
	// status.caRotation.secretDigest records it.
	Digest string
}

// data is the content of cas's Secret.
func (cas *RotationCAs) data() map[string][]byte {
	data := map[string][]byte{}
	if cas.Talos != nil {
		data[talosCertKey], data[talosKeyKey] = cas.Talos.Crt, cas.Talos.Key
	}
	if cas.Kubernetes != nil {
		data[kubernetesCertKey], data[kubernetesKeyKey] = cas.Kubernetes.Crt, cas.Kubernetes.Key
	}
	return data
}

// rotationDigest is the SHA-256 of the CAs in a rotation's Secret data:
// of each key it reads, in a fixed order, its name and length, then its
// bytes, so that no two contents share a digest. Other keys are never
// read, and do not count.
func rotationDigest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range []string{talosCertKey, talosKeyKey, kubernetesCertKey, kubernetesKeyKey} {
		fmt.Fprintf(h, "%s %d\n", k, len(data[k]))
		h.Write(data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Secrets are a cluster's secrets as they are in force: the bundle of its
// Secret, except that during a CA rotation its Talos API CA (Certs.OS) and
// its Kubernetes CA (Certs.K8s) are the CAs that issue in the rotation's
// phase; and the CAs the nodes accept beside them.
type Secrets struct {
	*secrets.Bundle
	// TalosAccepted are the PEM certificates of the Talos API CAs the
	// nodes accept besides Certs.OS (machine.acceptedCAs): during a
	// rotation, the other CA; otherwise none.
	TalosAccepted [][]byte
	// KubernetesAccepted are those of the Kubernetes CAs accepted besides
	// Certs.K8s (cluster.acceptedCAs), likewise.
	KubernetesAccepted [][]byte
}

// TalosCA is the PEM of every Talos API CA a client trusts a node's
// certificate from: the issuing one and the accepted ones, since during a
// rotation nodes move from one to the other one by one.
func (s *Secrets) TalosCA() []byte {
	return bytes.Join(append([][]byte{s.Certs.OS.Crt}, s.TalosAccepted...), nil)
}

// KubernetesCA is the PEM of every Kubernetes CA a client trusts
// kube-apiserver's certificate from, likewise.
func (s *Secrets) KubernetesCA() []byte {
	return bytes.Join(append([][]byte{s.Certs.K8s.Crt}, s.KubernetesAccepted...), nil)
}

// TalosCredentials returns a client certificate for roles from the issuing
// Talos API CA, valid for ttl from at most ttl/4 ago, trusting every CA in
// force. One is minted when none of the issuing CA, roles and ttl is that
// fresh (see minted).
func (s *Secrets) TalosCredentials(roles role.Set, now time.Time, ttl time.Duration) (talos.Credentials, error) {
	creds, ok := minted.get(s.Bundle, roles, now, ttl)
	if !ok {
		var err error
		if creds, err = talos.MintCredentials(s.Bundle, roles, now, ttl); err != nil {
			return talos.Credentials{}, err
		}
		minted.put(s.Bundle, roles, now, ttl, creds)
	}
	creds.CA = s.TalosCA()
	return creds, nil
}

// minted keeps the controller's own Talos credentials. Minting one (a key
// pair, a CSR, its signature and verification) for every reconcile of every
// machine was a tenth of ichor-controller's CPU with 10,000 machines; one
// certificate now serves every session of a cluster for the first quarter
// of its lifetime, so each has three quarters of it left when a session
// opens, which is more than callers that renew half-way (the kubelet-serving
// approver) count on. They stay in memory, as the CA key they come from does.
var minted = &credentialCache{}

// maxMinted bounds the cache: past it, it starts over.
const maxMinted = 4096

type credentialCache struct {
	mu      sync.Mutex
	entries map[credentialKey]mintedCredentials
}

// credentialKey is the issuing CA (certificate and key), roles and lifetime.
type credentialKey struct {
	ca, roles string
	ttl       time.Duration
}

type mintedCredentials struct {
	at    time.Time
	creds talos.Credentials
}

func keyOf(bundle *secrets.Bundle, roles role.Set, ttl time.Duration) (credentialKey, bool) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.OS == nil {
		return credentialKey{}, false
	}
	return credentialKey{ca: string(bundle.Certs.OS.Crt) + string(bundle.Certs.OS.Key), roles: strings.Join(roles.Strings(), ","), ttl: ttl}, true
}

func (c *credentialCache) get(bundle *secrets.Bundle, roles role.Set, now time.Time, ttl time.Duration) (talos.Credentials, bool) {
	k, ok := keyOf(bundle, roles, ttl)
	if !ok {
		return talos.Credentials{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || now.Before(e.at) || !now.Before(e.at.Add(ttl/4)) {
		return talos.Credentials{}, false
	}
	return e.creds, true
}

func (c *credentialCache) put(bundle *secrets.Bundle, roles role.Set, now time.Time, ttl time.Duration, creds talos.Credentials) {
	k, ok := keyOf(bundle, roles, ttl)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxMinted {
		c.entries = map[credentialKey]mintedCredentials{}
	}
	c.entries[k] = mintedCredentials{at: now, creds: creds}
}

// inForce is bundle as it is in force in rotation's phase, with the new
// CAs next. The cached bundle is not changed: the result is a copy.
func inForce(bundle *secrets.Bundle, rotation *v1alpha1.CARotationStatus, next *RotationCAs) *Secrets {
	if rotation == nil || next == nil {
		return &Secrets{Bundle: bundle}
	}
	b := *bundle
	certs := *bundle.Certs
	b.Certs = &certs
	out := &Secrets{Bundle: &b}
	if next.Talos != nil {
		certs.OS, out.TalosAccepted = phaseCAs(rotation.Phase, bundle.Certs.OS, next.Talos)
	}
	if next.Kubernetes != nil {
		certs.K8s, out.KubernetesAccepted = phaseCAs(rotation.Phase, bundle.Certs.K8s, next.Kubernetes)
	}
	return out
}

// phaseCAs are the issuing CA and the accepted ones of a CA moving from old
// to next, in phase.
func phaseCAs(phase v1alpha1.CARotationPhase, old, next *x509.PEMEncodedCertificateAndKey) (*x509.PEMEncodedCertificateAndKey, [][]byte) {
	if bytes.Equal(old.Crt, next.Crt) {
		// The bundle has the new CA already (the rotation is ending).
		return next, nil
	}
	switch phase {
	case v1alpha1.CARotationIssueNew:
		return next, [][]byte{old.Crt}
	case v1alpha1.CARotationDropOld:
		return next, nil
	default:
		return old, [][]byte{next.Crt}
	}
}

// LoadRotationCAs reads the new CAs of cluster's rotation: nil when it has
// none, or their Secret is not there. A Secret whose CAs are not those
// status.caRotation.secretDigest records is refused. A rotation started
// before digests were recorded has none: its Secret is taken as it is, as
// it was then, and the operation records its digest at its next step.
func LoadRotationCAs(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*RotationCAs, error) {
	rotation := cluster.Status.CARotation
	if rotation == nil {
		return nil, nil
	}
	s, err := getRotationSecret(ctx, reader, cluster)
	if err != nil || s == nil {
		return nil, err
	}
	if rotation.SecretDigest != "" && rotationDigest(s.Data) != rotation.SecretDigest {
		return nil, rotationMismatch(cluster)
	}
	return rotationCAsOf(s)
}

// rotationMismatch refuses the Secret of cluster's rotation.
func rotationMismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the new CAs ichor-controller generated for this rotation (their SHA-256 is not status.caRotation.secretDigest); "+
			"it is neither used nor deleted. Restore it from a copy, or, in phase %s, delete it: a ca-rotation then generates new CAs",
		cluster.Namespace, RotationSecretName(cluster), v1alpha1.CARotationAcceptNew)
}

// getRotationSecret reads the Secret of cluster's rotation, nil if there is
// none.
func getRotationSecret(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*corev1.Secret, error) {
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: RotationSecretName(cluster)}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the new CAs of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return &s, nil
}

// rotationCAsOf reads the CAs of a rotation's Secret.
func rotationCAsOf(s *corev1.Secret) (*RotationCAs, error) {
	if s.Type != v1alpha1.SecretTypeCARotation {
		return nil, refuse(v1alpha1.ClusterReasonSecretConflict, "Secret %s/%s is not of type %s: it is not a rotation's CAs, and is neither used nor deleted",
			s.Namespace, s.Name, v1alpha1.SecretTypeCARotation)
	}
	out := &RotationCAs{Digest: rotationDigest(s.Data)}
	for _, ca := range []struct {
		dst      **x509.PEMEncodedCertificateAndKey
		crt, key string
		which    string
	}{{&out.Talos, talosCertKey, talosKeyKey, "Talos API"}, {&out.Kubernetes, kubernetesCertKey, kubernetesKeyKey, "Kubernetes"}} {
		if len(s.Data[ca.crt]) == 0 && len(s.Data[ca.key]) == 0 {
			continue
		}
		pair := &x509.PEMEncodedCertificateAndKey{Crt: s.Data[ca.crt], Key: s.Data[ca.key]}
		if _, err := x509.NewCertificateAuthorityFromCertificateAndKey(pair); err != nil {
			// Its errors name no key material.
			return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s does not hold a %s CA certificate and its key: %v", s.Namespace, s.Name, ca.which, err)
		}
		*ca.dst = pair
	}
	if out.Talos == nil && out.Kubernetes == nil {
		return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s holds no CA", s.Namespace, s.Name)
	}
	return out, nil
}

// NewRotationCAs generates the new CAs of a rotation of cluster's Talos API
// CA if talosCA, and of its Kubernetes CA if kubernetesCA, with machinery
// as talosctl gen secrets does. They are only in memory: the caller
// records their Digest in status.caRotation, then stores them
// (StoreRotationCAs).
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
	out.Digest = rotationDigest(out.data())
	return out, nil
}

// StoreRotationCAs creates the Secret of cas, the new CAs of cluster's
// rotation, once status.caRotation.secretDigest records their digest. A
// Secret of that name that appeared meanwhile is refused, and left as it
// is.
func StoreRotationCAs(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, cas *RotationCAs) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      RotationSecretName(cluster),
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": cluster.Name},
		},
		Type: v1alpha1.SecretTypeCARotation,
		Data: cas.data(),
	}
	err := c.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return rotationMismatch(cluster)
	}
	if err != nil {
		return fmt.Errorf("store the new CAs in Secret %s/%s: %w", cluster.Namespace, secret.Name, err)
	}
	return nil
}

// DeleteRotationCAs deletes the Secret of cluster's rotation once the
// bundle holds its CAs: what a rotation leaves if it stops between its end
// and the deletion. A Secret holding anything else is refused, and left as
// it is: it is not the rotation's.
func DeleteRotationCAs(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	s, err := getRotationSecret(ctx, reader, cluster)
	if err != nil || s == nil {
		return err
	}
	foreign := refuse(v1alpha1.ClusterReasonSecretConflict,
		"Secret %s/%s exists but does not hold new CAs of a rotation of this cluster; it is neither used nor deleted. Delete it, then start a ca-rotation again",
		s.Namespace, s.Name)
	cas, err := rotationCAsOf(s)
	if err != nil {
		return foreign
	}
	bundle, err := loadBundle(ctx, reader, cluster, nil)
	if err != nil {
		return err
	}
	same := func(a, b *x509.PEMEncodedCertificateAndKey) bool {
		return a == nil || (bytes.Equal(a.Crt, b.Crt) && bytes.Equal(a.Key, b.Key))
	}
	if !same(cas.Talos, bundle.Certs.OS) || !same(cas.Kubernetes, bundle.Certs.K8s) {
		return foreign
	}
	err = c.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// StoreCAs writes the new CAs into the bundle of cluster's Secret, keeping
// the rest of the bundle; the Secret's type and keys stay. A generated
// bundle's new digest is recorded first. A bundle that has them already is
// left alone.
func StoreCAs(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, cas *RotationCAs) error {
	name := SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	bundle, err := bundleOf(cluster, &s, cas)
	if err != nil {
		return err
	}
	data, changed, err := withCAs(bundle, cas)
	if err != nil || !changed {
		return err
	}
	if cluster.Spec.SecretsRef == nil {
		if err := recordDigest(ctx, c, cluster, Digest(data)); err != nil {
			return err
		}
	}
	s.Data[BundleKey] = data
	if err := c.Update(ctx, &s); err != nil {
		return fmt.Errorf("write the new CAs into Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	return nil
}

// withCAs is bundle, encoded as StoreCAs stores it, with cas in place of
// its CAs; changed is false when it has them already. bundle is not
// changed.
func withCAs(bundle *secrets.Bundle, cas *RotationCAs) (data []byte, changed bool, _ error) {
	b := *bundle
	certs := *bundle.Certs
	b.Certs = &certs
	if cas.Talos != nil && !bytes.Equal(certs.OS.Crt, cas.Talos.Crt) {
		certs.OS, changed = cas.Talos, true
	}
	if cas.Kubernetes != nil && !bytes.Equal(certs.K8s.Crt, cas.Kubernetes.Crt) {
		certs.K8s, changed = cas.Kubernetes, true
	}
	if !changed {
		return nil, false, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&b); err != nil {
		return nil, false, errors.New("encode the secrets bundle") // its error could quote a value
	}
	if err := enc.Close(); err != nil {
		return nil, false, errors.New("encode the secrets bundle")
	}
	return buf.Bytes(), true, nil
}
