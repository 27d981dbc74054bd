package bundlestore

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// A pending is what a rotation keeps in a Secret of its own from its first
// phase to its end, when the bundle's Secret takes it and the rotation's
// Secret is deleted: a ca-rotation's new CAs, a key-rotation's new keys.
// Its digest is recorded in the cluster's status before the Secret is
// written; a Secret of that name holding anything else is never used, nor
// deleted.
type pending[T any] struct {
	// noun names what it holds, for people: "CAs", "keys".
	noun string
	// operation is the operation type that rotates it.
	operation v1alpha1.OperationType
	// digestField is the status field that records its digest.
	digestField string
	secretType  corev1.SecretType
	name        func(*v1alpha1.TalosCluster) string
	// recorded is the digest the cluster records, and whether a rotation
	// is under way at all.
	recorded func(*v1alpha1.TalosCluster) (digest string, rotating bool)
	digest   func(map[string][]byte) string
	decode   func(map[string][]byte) (T, error)
	data     func(T) map[string][]byte
	// heldBy reports whether bundle holds it already.
	heldBy func(T, *secrets.Bundle) bool
}

// load reads it for cluster: ok is false when no rotation is under way or
// its Secret is not there. A Secret whose content is not what the cluster
// records is refused; a rotation that recorded no digest (one started
// before digests were recorded) takes its Secret as it is.
func (p pending[T]) load(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (v T, ok bool, _ error) {
	want, rotating := p.recorded(cluster)
	if !rotating {
		return v, false, nil
	}
	s, err := p.get(ctx, reader, cluster)
	if err != nil || s == nil {
		return v, false, err
	}
	if want != "" && p.digest(s.Data) != want {
		return v, false, p.mismatch(cluster)
	}
	v, err = p.of(s)
	return v, err == nil, err
}

// mismatch refuses the Secret of cluster's rotation.
func (p pending[T]) mismatch(cluster *v1alpha1.TalosCluster) *Refusal {
	return refuse(v1alpha1.ClusterReasonSecretDigestMismatch,
		"Secret %s/%s does not hold the new %s ichor-controller generated for this rotation (their SHA-256 is not %s); "+
			"it is neither used nor deleted. Restore it from a copy, or, in phase %s, delete it: a %s then generates new %s",
		cluster.Namespace, p.name(cluster), p.noun, p.digestField, v1alpha1.CARotationAcceptNew, p.operation, p.noun)
}

// get reads the Secret of cluster's rotation, nil if there is none.
func (p pending[T]) get(ctx context.Context, reader client.Reader, cluster *v1alpha1.TalosCluster) (*corev1.Secret, error) {
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: p.name(cluster)}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the new %s of TalosCluster %s/%s: %w", p.noun, cluster.Namespace, cluster.Name, err)
	}
	return &s, nil
}

// of decodes a rotation's Secret.
func (p pending[T]) of(s *corev1.Secret) (T, error) {
	var zero T
	if s.Type != p.secretType {
		return zero, refuse(v1alpha1.ClusterReasonSecretConflict, "Secret %s/%s is not of type %s: it is not a rotation's %s, and is neither used nor deleted",
			s.Namespace, s.Name, p.secretType, p.noun)
	}
	v, err := p.decode(s.Data)
	if err != nil {
		return zero, refuse(v1alpha1.ClusterReasonInvalidBundle, "Secret %s/%s %v", s.Namespace, s.Name, err)
	}
	return v, nil
}

// store creates the Secret of v once the cluster records its digest. A
// Secret of that name that appeared meanwhile is refused, and left as it
// is.
func (p pending[T]) store(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, v T) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      p.name(cluster),
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": cluster.Name},
		},
		Type: p.secretType,
		Data: p.data(v),
	}
	err := c.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return p.mismatch(cluster)
	}
	if err != nil {
		return fmt.Errorf("store the new %s in Secret %s/%s: %w", p.noun, cluster.Namespace, secret.Name, err)
	}
	return nil
}

// remove deletes the Secret of cluster's rotation once the bundle holds
// what it holds: what a rotation leaves if it stops between its end and
// the deletion. A Secret holding anything else is refused, and left as it
// is: it is not the rotation's.
func (p pending[T]) remove(ctx context.Context, c client.Client, reader client.Reader, cluster *v1alpha1.TalosCluster) error {
	s, err := p.get(ctx, reader, cluster)
	if err != nil || s == nil {
		return err
	}
	foreign := refuse(v1alpha1.ClusterReasonSecretConflict,
		"Secret %s/%s exists but does not hold new %s of a rotation of this cluster; it is neither used nor deleted. Delete it, then start a %s again",
		s.Namespace, s.Name, p.noun, p.operation)
	v, err := p.of(s)
	if err != nil {
		return foreign
	}
	bundle, err := loadBundle(ctx, reader, cluster, nil, nil)
	if err != nil {
		return err
	}
	if !p.heldBy(v, bundle) {
		return foreign
	}
	err = c.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
