package bundlestore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/siderolabs/crypto/x509"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// A CA rotation keeps its new CAs in a Secret of its own (type
// v1alpha1.SecretTypeCARotation, named by secretsbundle.RotationSecretName)
// from its first phase to its end, when they are written into the bundle's
// Secret (StoreCAs) and the rotation's Secret is deleted
// (DeleteRotationCAs). In between, Load gives everyone the secrets in force
// in the rotation's phase. A Secret of that name holding other CAs than
// those whose digest status.caRotation records is never used, nor deleted.

// LoadRotationCAs reads the new CAs of cluster's rotation: nil when it has
// none, or their Secret is not there. A Secret whose CAs are not those
// status.caRotation.secretDigest records is refused. A rotation started
// before digests were recorded has none: its Secret is taken as it is, as
// it was then, and the operation records its digest at its next step.
func LoadRotationCAs(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secretsbundle.RotationCAs, error) {
	rotation := cluster.Status.CARotation
	if rotation == nil {
		return nil, nil
	}
	s, err := getRotationSecret(ctx, reader, cluster)
	if err != nil || s == nil {
		return nil, err
	}
	if rotation.SecretDigest != "" && secretsbundle.RotationDigest(s.Data) != rotation.SecretDigest {
		return nil, rotationMismatch(cluster)
	}
	return rotationCAsOf(s)
}

// rotationMismatch refuses the Secret of cluster's rotation.
func rotationMismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the new CAs ichor-controller generated for this rotation (their SHA-256 is not status.caRotation.secretDigest); "+
			"it is neither used nor deleted. Restore it from a copy, or, in phase %s, delete it: a ca-rotation then generates new CAs",
		cluster.Namespace, secretsbundle.RotationSecretName(cluster), v1alpha1.CARotationAcceptNew)
}

// getRotationSecret reads the Secret of cluster's rotation, nil if there is
// none.
func getRotationSecret(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*corev1.Secret, error) {
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: secretsbundle.RotationSecretName(cluster)}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the new CAs of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return &s, nil
}

// rotationCAsOf reads the CAs of a rotation's Secret.
func rotationCAsOf(s *corev1.Secret) (*secretsbundle.RotationCAs, error) {
	if s.Type != v1alpha1.SecretTypeCARotation {
		return nil, refuse(v1alpha1.ClusterReasonSecretConflict, "Secret %s/%s is not of type %s: it is not a rotation's CAs, and is neither used nor deleted",
			s.Namespace, s.Name, v1alpha1.SecretTypeCARotation)
	}
	cas, err := secretsbundle.DecodeRotationCAs(s.Data)
	if err != nil {
		return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s %v", s.Namespace, s.Name, err)
	}
	return cas, nil
}

// StoreRotationCAs creates the Secret of cas, the new CAs of cluster's
// rotation, once status.caRotation.secretDigest records their digest. A
// Secret of that name that appeared meanwhile is refused, and left as it
// is.
func StoreRotationCAs(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, cas *secretsbundle.RotationCAs) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      secretsbundle.RotationSecretName(cluster),
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": cluster.Name},
		},
		Type: v1alpha1.SecretTypeCARotation,
		Data: cas.Data(),
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
	bundle, err := loadBundle(ctx, reader, cluster, nil, nil)
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
func StoreCAs(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, cas *secretsbundle.RotationCAs) error {
	name := secretsbundle.SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	bundle, err := BundleOf(cluster, &s, cas, nil)
	if err != nil {
		return err
	}
	data, changed, err := secretsbundle.WithCAs(bundle, cas)
	if err != nil || !changed {
		return err
	}
	if cluster.Spec.SecretsRef == nil {
		if err := RecordDigest(ctx, c, cluster, secretsbundle.Digest(data)); err != nil {
			return err
		}
	}
	s.Data[secretsbundle.BundleKey] = data
	if err := c.Update(ctx, &s); err != nil {
		return fmt.Errorf("write the new CAs into Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	return nil
}
