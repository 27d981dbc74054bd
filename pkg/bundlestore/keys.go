package bundlestore

import (
	"bytes"
	"context"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
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

// pendingKeys are a key-rotation's new Kubernetes keys.
var pendingKeys = pending[*secretsbundle.RotationKeys]{
	noun: "keys", operation: v1alpha1.OperationKeyRotation, digestField: "status.kubernetesKeyRotation.secretDigest",
	secretType: v1alpha1.SecretTypeKeyRotation, name: secretsbundle.KeysSecretName,
	recorded: func(c *v1alpha1.TalosCluster) (string, bool) {
		if r := c.Status.KubernetesKeyRotation; r != nil {
			return r.SecretDigest, true
		}
		return "", false
	},
	digest: secretsbundle.KeysDigest,
	decode: secretsbundle.DecodeRotationKeys,
	data:   (*secretsbundle.RotationKeys).Data,
	heldBy: func(keys *secretsbundle.RotationKeys, bundle *secrets.Bundle) bool {
		return (keys.ServiceAccount == nil || bytes.Equal(keys.ServiceAccount.Key, bundle.Certs.K8sServiceAccount.Key)) &&
			(keys.Encryption == nil || keys.Encryption.Secret == bundle.Secrets.SecretboxEncryptionSecret)
	},
}

// LoadRotationKeys reads the new keys of cluster's key rotation: nil when it
// has none, or their Secret is not there. A Secret whose keys are not those
// status.kubernetesKeyRotation.secretDigest records is refused.
func LoadRotationKeys(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secretsbundle.RotationKeys, error) {
	keys, _, err := pendingKeys.load(ctx, reader, cluster)
	return keys, err
}

// StoreRotationKeys creates the Secret of keys, the new keys of cluster's
// rotation, once status.kubernetesKeyRotation.secretDigest records their
// digest. A Secret of that name that appeared meanwhile is refused.
func StoreRotationKeys(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, keys *secretsbundle.RotationKeys) error {
	return pendingKeys.store(ctx, c, cluster, keys)
}

// DeleteRotationKeys deletes the Secret of cluster's key rotation once the
// bundle holds its keys. A Secret holding anything else is refused, and
// left as it is.
func DeleteRotationKeys(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	return pendingKeys.remove(ctx, c, reader, cluster)
}

// StoreKeys writes the new keys into the bundle of cluster's Secret,
// keeping the rest of the bundle. A generated bundle's new digest is
// recorded first. A bundle that has them already is left alone.
func StoreKeys(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, keys *secretsbundle.RotationKeys) error {
	return writeBundle(ctx, c, reader, cluster, "the new keys", nil, keys, func(b *secrets.Bundle) ([]byte, bool, error) { return secretsbundle.WithKeys(b, keys) })
}
