// Package secretsbundle is a TalosCluster's secrets bundle itself: the
// Talos, Kubernetes and etcd CAs, keys and tokens the cluster's configs are
// rendered from, in the YAML `talosctl gen secrets` writes. It generates,
// parses and digests a bundle, names the Secrets that hold it and a CA
// rotation's new CAs and encodes those, and gives the secrets in force
// during a rotation with the Talos credentials minted from them.
//
// It is pure: no client, no controller. ichor-controller reads and writes
// the Secrets through pkg/bundlestore; the ichor CLI (ichor init) makes and
// checks a bundle with this package alone, on the admin's machine.
//
// A bundle never appears in a log line, an Event, a status or an error
// message: errors here name the key and the fields that are wrong, never
// values.
package secretsbundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// BundleKey is the key of the bundle in its Secret: the file name
// `talosctl gen secrets` writes, so a bundle made by hand is stored with
// `kubectl create secret generic NAME --from-file=secrets.yaml`.
const BundleKey = "secrets.yaml"

// SecretType marks the Secrets Ichor generates.
const SecretType corev1.SecretType = "ichor.dev/talos-secrets-bundle"

// SecretName is the Secret holding cluster's bundle: the one spec.secretsRef
// names, or <cluster>-secrets.
func SecretName(cluster *v1alpha1.TalosCluster) string {
	if ref := cluster.Spec.SecretsRef; ref != nil {
		return ref.Name
	}
	return cluster.Name + "-secrets"
}

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
	return encode(bundle)
}

// Parse reads and validates a bundle from data (a Secret's key BundleKey).
// Its errors name fields, never values.
func Parse(data []byte) (*secrets.Bundle, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("key %s is missing or empty", BundleKey)
	}
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal(data, bundle); err != nil {
		return nil, errNotABundle
	}
	// Ichor's clusters run Kubernetes and etcd on every Talos version: the
	// current contract requires all of their secrets.
	if err := bundle.Validate(config.TalosVersionCurrent); err != nil {
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

// WithCAs is bundle, encoded as its Secret stores it, with cas in place of
// its CAs; changed is false when it has them already. bundle is not
// changed.
func WithCAs(bundle *secrets.Bundle, cas *RotationCAs) (data []byte, changed bool, _ error) {
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
	data, err := encode(&b)
	if err != nil {
		return nil, false, errors.New("encode the secrets bundle") // its error could quote a value
	}
	return data, true, nil
}

// encode writes bundle as `talosctl gen secrets` does.
func encode(bundle *secrets.Bundle) ([]byte, error) {
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
