package clustersecrets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
)

// BundleKey is the key of the bundle in its Secret: the file name
// `talosctl gen secrets` writes, so a bundle made by hand is stored with
// `kubectl create secret generic NAME --from-file=secrets.yaml`.
const BundleKey = "secrets.yaml"

// errNotABundle says a Secret's data is not a bundle, without quoting it:
// YAML errors quote the text they could not read, and that text is secret.
var errNotABundle = errors.New("key " + BundleKey + " does not hold a Talos secrets bundle in YAML")

// Generate makes a new bundle for a cluster running talosVersion, with
// machinery's secrets package, and encodes it as `talosctl gen secrets` does.
func Generate(talosVersion string, now time.Time) ([]byte, error) {
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: %w", talosVersion, err)
	}
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(now), contract)
	if err != nil {
		return nil, fmt.Errorf("generate secrets bundle: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(bundle); err != nil {
		return nil, fmt.Errorf("encode secrets bundle: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode secrets bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// Parse reads and validates a bundle as Load does, from data (a Secret's
// key BundleKey). Its errors name fields, never values.
func Parse(data []byte) (*secrets.Bundle, error) { return parse(data) }

// parse reads and validates a bundle. Its errors name fields, never values.
func parse(data []byte) (*secrets.Bundle, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("key %s is missing or empty", BundleKey)
	}
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal(data, bundle); err != nil {
		return nil, errNotABundle
	}
	if err := bundle.Validate(); err != nil {
		return nil, fmt.Errorf("the bundle in key %s is incomplete: %w", BundleKey, err)
	}
	return bundle, nil
}

// Digest is the SHA-256 of a bundle as its Secret stores it (the bytes of
// key BundleKey), in the form status.secretsDigest records: what
// `sha256sum` of that key shows, after "sha256:".
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// A Refusal is why a Secret is not used for what its name says: a
// SecretsReady reason and a message naming the Secret, never its content.
type Refusal struct{ Reason, Message string }

func (r *Refusal) Error() string { return r.Message }

func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Load reads the secrets in force for cluster (see Secrets) with reader
// (one that does not cache): its bundle, and during a CA rotation the
// rotation's new CAs. A generated bundle, and a rotation's CAs, are used
// only when they are what ichor-controller recorded the digest of. Its
// errors name the Secret and what is wrong, never a value.
func Load(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*Secrets, error) {
	rotation := cluster.Status.CARotation
	var next *RotationCAs
	if rotation != nil {
		var err error
		if next, err = LoadRotationCAs(ctx, reader, cluster); err != nil {
			return nil, err
		}
		// In the first phase the new CAs are recorded before they are
		// stored: until then, the bundle alone is in force.
		if next == nil && rotation.Phase != v1alpha1.CARotationAcceptNew {
			return nil, fmt.Errorf("TalosCluster %s/%s is in phase %s of a CA rotation, but Secret %s with the new CAs is gone: "+
				"recreate it from a copy, or restore the CAs by hand", cluster.Namespace, cluster.Name, rotation.Phase, RotationSecretName(cluster))
		}
	}
	bundle, err := loadBundle(ctx, reader, cluster, next)
	if err != nil {
		return nil, err
	}
	return inForce(bundle, rotation, next), nil
}

// loadBundle reads the bundle of cluster's Secret (see bundleOf).
func loadBundle(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster, next *RotationCAs) (*secrets.Bundle, error) {
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: SecretName(cluster)}, &s); err != nil {
		return nil, fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return bundleOf(cluster, &s, next)
}

// bundleOf is the bundle Secret s holds for cluster. One named by
// spec.secretsRef is an admin's choice. One ichor-controller generated is
// used only if its bytes are those whose digest it recorded in
// status.secretsDigest before it wrote them — whoever created the Secret
// and whatever its owners, labels or annotations say — or, while a CA
// rotation's end writes next into it (StoreCAs records the new digest
// first), the bundle that becomes that one with next.
func bundleOf(cluster *v1alpha1.TalosCluster, s *corev1.Secret, next *RotationCAs) (*secrets.Bundle, error) {
	data := s.Data[BundleKey]
	digest := Digest(data)
	if want := cluster.Status.SecretsDigest; cluster.Spec.SecretsRef == nil && digest != want {
		if want == "" {
			return nil, refuse(v1alpha1.ClusterReasonSecretConflict,
				"Secret %s/%s exists but was not generated for this cluster (status.secretsDigest records no bundle); it is neither used nor overwritten. "+
					"Delete it to have one generated, or name it in spec.secretsRef to use it", s.Namespace, s.Name)
		}
		if next == nil {
			return nil, digestMismatch(cluster)
		}
		bundle, err := parsed.parse(digest, data)
		if err != nil {
			return nil, digestMismatch(cluster)
		}
		if stored, changed, err := withCAs(bundle, next); err != nil || !changed || Digest(stored) != want {
			return nil, digestMismatch(cluster)
		}
		return bundle, nil
	}
	bundle, err := parsed.parse(digest, data)
	if err != nil {
		return nil, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	return bundle, nil
}

// digestMismatch refuses the Secret of cluster's generated bundle.
func digestMismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the bundle ichor-controller generated for this cluster (its SHA-256 is not status.secretsDigest); "+
			"it is neither used nor overwritten. Restore the bundle from a copy, name the Secret in spec.secretsRef if it is the bundle "+
			"you mean the cluster to use, or, for a cluster never bootstrapped, delete it to have a new one generated",
		cluster.Namespace, SecretName(cluster))
}

// adoptable reports whether s is the bundle a cluster generated before
// ichor-controller recorded digests: none is recorded, the cluster
// reported SecretsReady True with reason Generated (which, since digests
// are recorded, it reports only with one), and s names the cluster its
// controller, as the bundles generated then did. Its digest is recorded
// once (Reconciler.ensureBundle); a new cluster never adopts a Secret.
func adoptable(cluster *v1alpha1.TalosCluster, s *corev1.Secret) bool {
	if cluster.Spec.SecretsRef != nil || cluster.Status.SecretsDigest != "" {
		return false
	}
	c := meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ClusterReasonGenerated && metav1.IsControlledBy(s, cluster)
}

// DigestFieldManager owns status.secretsDigest: only recordDigest writes
// it, and always whole.
const DigestFieldManager = "ichor-secrets-digest"

// recordDigest records digest as that of cluster's generated bundle, with
// server-side apply conditional on the cluster's resourceVersion (a
// decision taken on another version of the cluster is not written), and
// updates cluster to the version written.
func recordDigest(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, digest string) error {
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

// parse is parse(data), whose digest is digest, once.
func (c *bundleCache) parse(digest string, data []byte) (*secrets.Bundle, error) {
	c.mu.Lock()
	b := c.entries[digest]
	c.mu.Unlock()
	if b != nil {
		return b, nil
	}
	b, err := parse(data)
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
