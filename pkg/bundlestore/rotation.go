package bundlestore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
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

// pendingCAs are a ca-rotation's new CAs.
var pendingCAs = pending[*secretsbundle.RotationCAs]{
	noun: "CAs", operation: v1alpha1.OperationCARotation, digestField: "status.caRotation.secretDigest",
	secretType: v1alpha1.SecretTypeCARotation, name: secretsbundle.RotationSecretName,
	recorded: func(c *v1alpha1.TalosCluster) (string, bool) {
		if r := c.Status.CARotation; r != nil {
			return r.SecretDigest, true
		}
		return "", false
	},
	digest: secretsbundle.RotationDigest,
	decode: secretsbundle.DecodeRotationCAs,
	data:   (*secretsbundle.RotationCAs).Data,
	heldBy: func(cas *secretsbundle.RotationCAs, bundle *secrets.Bundle) bool {
		same := func(a, b *x509.PEMEncodedCertificateAndKey) bool {
			return a == nil || (bytes.Equal(a.Crt, b.Crt) && bytes.Equal(a.Key, b.Key))
		}
		return same(cas.Talos, bundle.Certs.OS) && same(cas.Kubernetes, bundle.Certs.K8s)
	},
}

// LoadRotationCAs reads the new CAs of cluster's rotation: nil when it has
// none, or their Secret is not there. A Secret whose CAs are not those
// status.caRotation.secretDigest records is refused. A rotation started
// before digests were recorded has none: its Secret is taken as it is, as
// it was then, and the operation records its digest at its next step.
func LoadRotationCAs(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secretsbundle.RotationCAs, error) {
	cas, _, err := pendingCAs.load(ctx, reader, cluster)
	return cas, err
}

// StoreRotationCAs creates the Secret of cas, the new CAs of cluster's
// rotation, once status.caRotation.secretDigest records their digest. A
// Secret of that name that appeared meanwhile is refused, and left as it
// is.
func StoreRotationCAs(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, cas *secretsbundle.RotationCAs) error {
	return pendingCAs.store(ctx, c, cluster, cas)
}

// DeleteRotationCAs deletes the Secret of cluster's rotation once the
// bundle holds its CAs. A Secret holding anything else is refused, and
// left as it is: it is not the rotation's.
func DeleteRotationCAs(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	return pendingCAs.remove(ctx, c, reader, cluster)
}

// StoreCAs writes the new CAs into the bundle of cluster's Secret, keeping
// the rest of the bundle; the Secret's type and keys stay. A generated
// bundle's new digest is recorded first. A bundle that has them already is
// left alone.
func StoreCAs(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, cas *secretsbundle.RotationCAs) error {
	return writeBundle(ctx, c, reader, cluster, "the new CAs", cas, nil, func(b *secrets.Bundle) ([]byte, bool, error) { return secretsbundle.WithCAs(b, cas) })
}

// writeBundle writes into the bundle of cluster's Secret what with makes
// of it (the new CAs, or keys, of a rotation that ends: BundleOf accepts
// the bundle half-way), keeping the rest of the bundle, the Secret's type
// and keys. A generated bundle's new digest is recorded first. A bundle
// that with leaves unchanged is left alone.
func writeBundle(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster, what string,
	cas *secretsbundle.RotationCAs, keys *secretsbundle.RotationKeys, with func(*secrets.Bundle) ([]byte, bool, error)) error {
	name := secretsbundle.SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	bundle, err := BundleOf(cluster, &s, cas, keys)
	if err != nil {
		return err
	}
	data, changed, err := with(bundle)
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
		return fmt.Errorf("write %s into Secret %s/%s: %w", what, cluster.Namespace, name, err)
	}
	return nil
}
