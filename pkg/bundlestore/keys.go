package bundlestore

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// A key rotation keeps its new Kubernetes keys in a Secret of its own (type
// v1alpha1.SecretTypeKeyRotation, named by secretsbundle.KeysSecretName)
// from its first phase to its end, as a CA rotation keeps its CAs: the
// bundle's Secret takes them at the end (StoreKeys), and the rotation's
// Secret is then deleted (DeleteRotationKeys). A Secret of that name
// holding other keys than those whose digest
// status.kubernetesKeyRotation records is never used, nor deleted.

// LoadRotationKeys reads the new keys of cluster's key rotation: nil when it
// has none, or their Secret is not there. A Secret whose keys are not those
// status.kubernetesKeyRotation.secretDigest records is refused.
func LoadRotationKeys(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secretsbundle.RotationKeys, error) {
	rotation := cluster.Status.KubernetesKeyRotation
	if rotation == nil {
		return nil, nil
	}
	s, err := getSecret(ctx, reader, cluster, secretsbundle.KeysSecretName(cluster), "the new keys")
	if err != nil || s == nil {
		return nil, err
	}
	if secretsbundle.KeysDigest(s.Data) != rotation.SecretDigest {
		return nil, keysMismatch(cluster)
	}
	return rotationKeysOf(s)
}

// keysMismatch refuses the Secret of cluster's key rotation.
func keysMismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the new keys ichor-controller generated for this rotation (their SHA-256 is not status.kubernetesKeyRotation.secretDigest); "+
			"it is neither used nor deleted. Restore it from a copy, or, in phase %s, delete it: a key-rotation then generates new keys",
		cluster.Namespace, secretsbundle.KeysSecretName(cluster), v1alpha1.CARotationAcceptNew)
}

// getSecret reads cluster's Secret name, which holds what, nil if there is
// none.
func getSecret(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster, name, what string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of TalosCluster %s/%s: %w", what, cluster.Namespace, cluster.Name, err)
	}
	return &s, nil
}

// rotationKeysOf reads the keys of a key rotation's Secret.
func rotationKeysOf(s *corev1.Secret) (*secretsbundle.RotationKeys, error) {
	if s.Type != v1alpha1.SecretTypeKeyRotation {
		return nil, refuse(v1alpha1.ClusterReasonSecretConflict, "Secret %s/%s is not of type %s: it is not a rotation's keys, and is neither used nor deleted",
			s.Namespace, s.Name, v1alpha1.SecretTypeKeyRotation)
	}
	keys, err := secretsbundle.DecodeRotationKeys(s.Data)
	if err != nil {
		return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s %v", s.Namespace, s.Name, err)
	}
	return keys, nil
}

// StoreRotationKeys creates the Secret of keys, the new keys of cluster's
// rotation, once status.kubernetesKeyRotation.secretDigest records their
// digest. A Secret of that name that appeared meanwhile is refused, and
// left as it is.
func StoreRotationKeys(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, keys *secretsbundle.RotationKeys) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      secretsbundle.KeysSecretName(cluster),
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": cluster.Name},
		},
		Type: v1alpha1.SecretTypeKeyRotation,
		Data: keys.Data(),
	}
	err := c.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return keysMismatch(cluster)
	}
	if err != nil {
		return fmt.Errorf("store the new keys in Secret %s/%s: %w", cluster.Namespace, secret.Name, err)
	}
	return nil
}

// DeleteRotationKeys deletes the Secret of cluster's key rotation once the
// bundle holds its keys. A Secret holding anything else is refused, and
// left as it is.
func DeleteRotationKeys(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	s, err := getSecret(ctx, reader, cluster, secretsbundle.KeysSecretName(cluster), "the new keys")
	if err != nil || s == nil {
		return err
	}
	foreign := refuse(v1alpha1.ClusterReasonSecretConflict,
		"Secret %s/%s exists but does not hold new keys of a rotation of this cluster; it is neither used nor deleted. Delete it, then start a key-rotation again",
		s.Namespace, s.Name)
	keys, err := rotationKeysOf(s)
	if err != nil {
		return foreign
	}
	bundle, err := loadBundle(ctx, reader, cluster, nil, nil)
	if err != nil {
		return err
	}
	if (keys.ServiceAccount != nil && !bytes.Equal(keys.ServiceAccount.Key, bundle.Certs.K8sServiceAccount.Key)) ||
		(keys.Encryption != nil && keys.Encryption.Secret != bundle.Secrets.SecretboxEncryptionSecret) {
		return foreign
	}
	err = c.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// StoreKeys writes the new keys into the bundle of cluster's Secret,
// keeping the rest of the bundle. A generated bundle's new digest is
// recorded first. A bundle that has them already is left alone.
func StoreKeys(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, keys *secretsbundle.RotationKeys) error {
	name := secretsbundle.SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	bundle, err := BundleOf(cluster, &s, nil, keys)
	if err != nil {
		return err
	}
	data, changed, err := secretsbundle.WithKeys(bundle, keys)
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
		return fmt.Errorf("write the new keys into Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	return nil
}
