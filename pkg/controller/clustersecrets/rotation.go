package clustersecrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
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

// A Talos API CA rotation keeps the new CA in a Secret of its own (type
// v1alpha1.SecretTypeTalosCARotation, named by RotationSecretName) from its
// first phase to its end; the bundle's Secret changes only when the
// rotation completes, when the new CA is written into it (StoreTalosCA)
// and the rotation's Secret is deleted. In between, TalosCluster status.caRotation says which phase the
// cluster is in, and Load gives everyone the secrets in force in it.

// Keys of the rotation's Secret: the new CA's PEM certificate and key.
const (
	rotationCertKey = "tls.crt"
	rotationKeyKey  = "tls.key"
)

// AnnotationRotationOperation names the UID of the ca-rotation that
// generated a rotation's Secret.
const AnnotationRotationOperation = "ichor.dev/ca-rotation"

// RotationSecretName is the Secret of the new Talos API CA while cluster's
// CA rotates.
func RotationSecretName(cluster *v1alpha1.TalosCluster) string {
	return SecretName(cluster) + "-talos-ca-next"
}

// Secrets are a cluster's secrets as they are in force: the bundle of its
// Secret, except that during a Talos API CA rotation its Talos API CA
// (Certs.OS) is the CA that issues in the rotation's phase; and the CAs
// the nodes accept beside it.
type Secrets struct {
	*secrets.Bundle
	// TalosAccepted are the PEM certificates of the Talos API CAs the
	// nodes accept besides Certs.OS (machine.acceptedCAs): during a
	// rotation, the other CA; otherwise none.
	TalosAccepted [][]byte
}

// TalosCA is the PEM of every Talos API CA a client trusts a node's
// certificate from: the issuing one and the accepted ones, since during a
// rotation nodes move from one to the other one by one.
func (s *Secrets) TalosCA() []byte {
	return bytes.Join(append([][]byte{s.Certs.OS.Crt}, s.TalosAccepted...), nil)
}

// TalosCredentials mints a client certificate for roles from the issuing
// Talos API CA, trusting every CA in force.
func (s *Secrets) TalosCredentials(roles role.Set, now time.Time, ttl time.Duration) (talos.Credentials, error) {
	creds, err := talos.MintCredentials(s.Bundle, roles, now, ttl)
	if err != nil {
		return talos.Credentials{}, err
	}
	creds.CA = s.TalosCA()
	return creds, nil
}

// inForce is bundle as it is in force in rotation's phase, with the new
// CA next. The cached bundle is not changed: the result is a copy.
func inForce(bundle *secrets.Bundle, rotation *v1alpha1.CARotationStatus, next *x509.PEMEncodedCertificateAndKey) *Secrets {
	if rotation == nil || next == nil {
		return &Secrets{Bundle: bundle}
	}
	old := bundle.Certs.OS
	issuing, accepted := old, [][]byte{next.Crt}
	switch rotation.Phase {
	case v1alpha1.CARotationIssueNew:
		issuing, accepted = next, [][]byte{old.Crt}
	case v1alpha1.CARotationDropOld:
		issuing, accepted = next, nil
	}
	if bytes.Equal(old.Crt, next.Crt) {
		// The bundle has the new CA already (the rotation is ending).
		issuing, accepted = next, nil
	}
	b := *bundle
	certs := *bundle.Certs
	certs.OS = issuing
	b.Certs = &certs
	return &Secrets{Bundle: &b, TalosAccepted: accepted}
}

// LoadRotationCA reads the new CA of cluster's rotation, nil if it has no
// Secret.
func LoadRotationCA(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*x509.PEMEncodedCertificateAndKey, *corev1.Secret, error) {
	name := RotationSecretName(cluster)
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the new Talos API CA of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	if s.Type != v1alpha1.SecretTypeTalosCARotation {
		return nil, nil, fmt.Errorf("Secret %s/%s is not of type %s: it is not a rotation's CA, and is neither used nor overwritten", cluster.Namespace, name, v1alpha1.SecretTypeTalosCARotation)
	}
	ca := &x509.PEMEncodedCertificateAndKey{Crt: s.Data[rotationCertKey], Key: s.Data[rotationKeyKey]}
	if _, err := x509.NewCertificateAuthorityFromCertificateAndKey(ca); err != nil {
		// Its errors name no key material.
		return nil, nil, fmt.Errorf("Secret %s/%s does not hold a CA certificate and its key: %w", cluster.Namespace, name, err)
	}
	return ca, &s, nil
}

// EnsureRotationCA returns the new CA of the ca-rotation op on cluster,
// generating it (with machinery, as talosctl gen secrets does) and storing
// it first if it has none. A Secret left by a rotation that never started
// (no status.caRotation names one) is replaced; one of a rotation under way
// is taken over by op, which the caller has recorded in status.caRotation.
func EnsureRotationCA(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, op *v1alpha1.TalosOperation, now time.Time) (*x509.PEMEncodedCertificateAndKey, error) {
	ca, s, err := LoadRotationCA(ctx, reader, cluster)
	if err != nil {
		return nil, err
	}
	if ca != nil && (s.Annotations[AnnotationRotationOperation] == string(op.UID) || cluster.Status.CARotation != nil) {
		return ca, nil
	}
	if s != nil {
		if err := deleteRotationSecret(ctx, c, s); err != nil {
			return nil, err
		}
	}
	next, err := secrets.NewTalosCA(now)
	if err != nil {
		return nil, fmt.Errorf("generate a Talos API CA: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   cluster.Namespace,
			Name:        RotationSecretName(cluster),
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": cluster.Name},
			Annotations: map[string]string{AnnotationRotationOperation: string(op.UID)},
		},
		Type: v1alpha1.SecretTypeTalosCARotation,
		Data: map[string][]byte{rotationCertKey: next.CrtPEM, rotationKeyKey: next.KeyPEM},
	}
	if err := c.Create(ctx, secret); err != nil {
		return nil, fmt.Errorf("store the new Talos API CA in Secret %s/%s: %w", cluster.Namespace, secret.Name, err)
	}
	return &x509.PEMEncodedCertificateAndKey{Crt: next.CrtPEM, Key: next.KeyPEM}, nil
}

// DeleteRotationCA deletes the Secret of cluster's rotation, if any.
func DeleteRotationCA(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	_, s, err := LoadRotationCA(ctx, reader, cluster)
	if err != nil || s == nil {
		return err
	}
	return deleteRotationSecret(ctx, c, s)
}

func deleteRotationSecret(ctx context.Context, c client.Client, s *corev1.Secret) error {
	err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// StoreTalosCA writes ca as the Talos API CA of the bundle in cluster's
// Secret, keeping the rest of the bundle; the Secret's type and keys stay.
// A bundle that has it already is left alone.
func StoreTalosCA(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, ca *x509.PEMEncodedCertificateAndKey) error {
	name := SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	bundle, err := parse(s.Data[BundleKey])
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	if bytes.Equal(bundle.Certs.OS.Crt, ca.Crt) {
		return nil
	}
	bundle.Certs.OS = ca
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(bundle); err != nil {
		return errors.New("encode the secrets bundle") // its error could quote a value
	}
	if err := enc.Close(); err != nil {
		return errors.New("encode the secrets bundle")
	}
	s.Data[BundleKey] = buf.Bytes()
	if err := c.Update(ctx, &s); err != nil {
		return fmt.Errorf("write the new Talos API CA into Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	return nil
}
