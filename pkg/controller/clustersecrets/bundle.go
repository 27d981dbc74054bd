package clustersecrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
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

// Load reads the secrets in force for cluster (see Secrets) with reader
// (one that does not cache): its bundle, and during a Talos API CA
// rotation the rotation's new CA. Its errors name the Secret and what is
// wrong, never a value.
func Load(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*Secrets, error) {
	bundle, err := loadBundle(ctx, reader, cluster)
	if err != nil {
		return nil, err
	}
	rotation := cluster.Status.CARotation
	if rotation == nil {
		return &Secrets{Bundle: bundle}, nil
	}
	next, _, err := LoadRotationCAs(ctx, reader, cluster)
	if err != nil {
		return nil, err
	}
	if next == nil {
		return nil, fmt.Errorf("TalosCluster %s/%s is in phase %s of a CA rotation, but Secret %s with the new CAs is gone: "+
			"recreate it from a copy, or restore the CAs by hand", cluster.Namespace, cluster.Name, rotation.Phase, RotationSecretName(cluster))
	}
	return inForce(bundle, rotation, next), nil
}

// loadBundle reads the bundle of cluster's Secret.
func loadBundle(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*secrets.Bundle, error) {
	name := SecretName(cluster)
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("read the secrets bundle of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	if b := parsed.get(s.UID, s.ResourceVersion); b != nil {
		return b, nil
	}
	bundle, err := parse(s.Data[BundleKey])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	parsed.put(s.UID, s.ResourceVersion, bundle)
	return bundle, nil
}

// parsed keeps the bundles Load parsed, by their Secret's UID and
// resourceVersion. The Secret itself is read from the API server every
// time (the controller neither caches nor watches Secrets), but parsing
// it again — its YAML, then every certificate and key, an RSA key's
// precomputation included — cost more CPU than anything else ichor-
// controller does: every reconcile of every machine loads its cluster's
// bundle (a quarter of the process's CPU in a 100-node rolling upgrade).
// A bundle that Load returns is shared: callers only read it.
var parsed = &bundleCache{}

// maxParsedBundles bounds the cache: past it, it starts over.
const maxParsedBundles = 4096

type bundleCache struct {
	mu      sync.Mutex
	entries map[types.UID]parsedBundle
}

type parsedBundle struct {
	resourceVersion string
	bundle          *secrets.Bundle
}

func (c *bundleCache) get(uid types.UID, resourceVersion string) *secrets.Bundle {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[uid]; ok && e.resourceVersion == resourceVersion && uid != "" && resourceVersion != "" {
		return e.bundle
	}
	return nil
}

func (c *bundleCache) put(uid types.UID, resourceVersion string, bundle *secrets.Bundle) {
	if uid == "" || resourceVersion == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxParsedBundles {
		c.entries = map[types.UID]parsedBundle{}
	}
	c.entries[uid] = parsedBundle{resourceVersion: resourceVersion, bundle: bundle}
}
