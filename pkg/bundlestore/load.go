// Package bundlestore reads and writes a TalosCluster's secrets bundle, and
// a CA rotation's new CAs, in their Secrets through a controller-runtime
// client: it is how ichor-controller's reconcilers get the secrets in force
// (Load) and how a CA rotation stores its CAs. What a bundle is — its
// format, digest, names and the secrets in force — is pkg/secretsbundle's.
//
// A generated bundle, and a rotation's CAs, are used only when they are
// what ichor-controller recorded the digest of in the TalosCluster's
// status, before it wrote them: a Secret of that name holding anything
// else is refused (a Refusal), never used nor overwritten. Secrets are read
// with a reader that does not cache, so the controller needs neither list
// nor watch on them; errors name the Secret and what is wrong, never a
// value.
package bundlestore

import (
	"context"
	"fmt"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// A Refusal is why a Secret is not used for what its name says: a
// SecretsReady reason and a message naming the Secret, never its content.
type Refusal struct{ Reason, Message string }

func (r *Refusal) Error() string { return r.Message }

func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Load reads the secrets in force for cluster (see secretsbundle.Secrets)
// with reader (one that does not cache): its bundle, during a CA rotation
// the rotation's new CAs, and during a key rotation its new keys. A
// generated bundle, and a rotation's CAs or keys, are used only when they
// are what ichor-controller recorded the digest of. Its errors name the
// Secret and what is wrong, never a value.
func Load(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secretsbundle.Secrets, error) {
	rotation := cluster.Status.CARotation
	var next *secretsbundle.RotationCAs
	if rotation != nil {
		var err error
		if next, err = LoadRotationCAs(ctx, reader, cluster); err != nil {
			return nil, err
		}
		// In the first phase the new CAs are recorded before they are
		// stored: until then, the bundle alone is in force.
		if next == nil && rotation.Phase != v1alpha1.CARotationAcceptNew {
			return nil, fmt.Errorf("TalosCluster %s/%s is in phase %s of a CA rotation, but Secret %s with the new CAs is gone: "+
				"recreate it from a copy, or restore the CAs by hand", cluster.Namespace, cluster.Name, rotation.Phase, secretsbundle.RotationSecretName(cluster))
		}
	}
	keyRotation := cluster.Status.KubernetesKeyRotation
	var keys *secretsbundle.RotationKeys
	if keyRotation != nil {
		var err error
		if keys, err = LoadRotationKeys(ctx, reader, cluster); err != nil {
			return nil, err
		}
		if keys == nil && keyRotation.Phase != v1alpha1.CARotationAcceptNew {
			return nil, fmt.Errorf("TalosCluster %s/%s is in phase %s of a key rotation, but Secret %s with the new keys is gone: "+
				"recreate it from a copy, or restore the keys by hand", cluster.Namespace, cluster.Name, keyRotation.Phase, secretsbundle.KeysSecretName(cluster))
		}
	}
	bundle, err := loadBundle(ctx, reader, cluster, next, keys)
	if err != nil {
		return nil, err
	}
	return secretsbundle.InForce(bundle, rotation, next).WithKeys(keyRotation, keys, cluster.Status.SecretsEncryptionKeyName)
}

// loadBundle reads the bundle of cluster's Secret (see BundleOf).
func loadBundle(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster, next *secretsbundle.RotationCAs, keys *secretsbundle.RotationKeys) (*secrets.Bundle, error) {
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: secretsbundle.SecretName(cluster)}, &s); err != nil {
		return nil, fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return BundleOf(cluster, &s, next, keys)
}

// BundleOf is the bundle Secret s holds for cluster, or a Refusal. One
// named by spec.secretsRef is an admin's choice. One ichor-controller
// generated is used only if its bytes are those whose digest it recorded
// in status.secretsDigest before it wrote them — whoever created the Secret
// and whatever its owners, labels or annotations say — or, while a
// rotation's end writes the new CAs next or keys into it (StoreCAs and
// StoreKeys record the new digest first), the bundle that becomes that one
// with them.
func BundleOf(cluster *v1alpha1.TalosCluster, s *corev1.Secret, next *secretsbundle.RotationCAs, keys *secretsbundle.RotationKeys) (*secrets.Bundle, error) {
	data := s.Data[secretsbundle.BundleKey]
	digest := secretsbundle.Digest(data)
	if want := cluster.Status.SecretsDigest; cluster.Spec.SecretsRef == nil && digest != want {
		if want == "" {
			return nil, refuse(v1alpha1.ClusterReasonSecretConflict,
				"Secret %s/%s exists but was not generated for this cluster (status.secretsDigest records no bundle); it is neither used nor overwritten. "+
					"Delete it to have one generated, or name it in spec.secretsRef to use it", s.Namespace, s.Name)
		}
		bundle, err := parsed.parse(digest, data)
		if err != nil {
			return nil, DigestMismatch(cluster)
		}
		becomes := func(stored []byte, changed bool, err error) bool {
			return err == nil && changed && secretsbundle.Digest(stored) == want
		}
		if (next != nil && becomes(secretsbundle.WithCAs(bundle, next))) || (keys != nil && becomes(secretsbundle.WithKeys(bundle, keys))) {
			return bundle, nil
		}
		return nil, DigestMismatch(cluster)
	}
	bundle, err := parsed.parse(digest, data)
	if err != nil {
		return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	return bundle, nil
}

// DigestMismatch refuses the Secret of cluster's generated bundle: it does
// not hold the bundle whose digest status.secretsDigest records.
func DigestMismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the bundle ichor-controller generated for this cluster (its SHA-256 is not status.secretsDigest); "+
			"it is neither used nor overwritten. Restore the bundle from a copy, name the Secret in spec.secretsRef if it is the bundle "+
			"you mean the cluster to use, or, for a cluster never bootstrapped, delete it to have a new one generated",
		cluster.Namespace, secretsbundle.SecretName(cluster))
}

// DigestFieldManager owns status.secretsDigest: only RecordDigest writes
// it, and always whole.
const DigestFieldManager = v1alpha1.FieldManagerSecretsDigest

// RecordDigest records digest as that of cluster's generated bundle, with
// server-side apply conditional on the cluster's resourceVersion (a
// decision taken on another version of the cluster is not written), and
// updates cluster to the version written. The digest is recorded before
// the bundle it is of is written.
func RecordDigest(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, digest string) error {
	if cluster.Status.SecretsDigest == digest {
		return nil
	}
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithResourceVersion(cluster.ResourceVersion).
		WithStatus(ichorac.TalosClusterStatus().WithSecretsDigest(digest))
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(DigestFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("record the digest of TalosCluster %s/%s's secrets bundle: %w", cluster.Namespace, cluster.Name, err)
	}
	cluster.Status.SecretsDigest = digest
	if obj.ResourceVersion != nil {
		cluster.ResourceVersion = *obj.ResourceVersion
	}
	return nil
}

// parsed keeps the bundles Load parsed, by their digest. The Secret itself
// is read from the API server every time (the controller neither caches
// nor watches Secrets) and hashed, but parsing it again — its YAML, then
// every certificate and key, an RSA key's precomputation included — cost
// more CPU than anything else ichor-controller does: every reconcile of
// every machine loads its cluster's bundle (a quarter of the process's CPU
// in a 100-node rolling upgrade). Keyed by content, an entry is the parse
// of exactly the bytes that were checked. A bundle that Load returns is
// shared: callers only read it.
var parsed = &bundleCache{}

// maxParsedBundles bounds the cache: past it, it starts over.
const maxParsedBundles = 4096

type bundleCache struct {
	mu      sync.Mutex
	entries map[string]*secrets.Bundle
}

// parse is secretsbundle.Parse(data), whose digest is digest, once.
func (c *bundleCache) parse(digest string, data []byte) (*secrets.Bundle, error) {
	c.mu.Lock()
	b := c.entries[digest]
	c.mu.Unlock()
	if b != nil {
		return b, nil
	}
	b, err := secretsbundle.Parse(data)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxParsedBundles {
		c.entries = map[string]*secrets.Bundle{}
	}
	c.entries[digest] = b
	return b, nil
}
