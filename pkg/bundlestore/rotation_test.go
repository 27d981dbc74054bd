package bundlestore

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// TestRotationCAsAreThoseRecorded: during a CA rotation, the new CAs are
// read only from a Secret holding what status.caRotation.secretDigest
// records, whatever its type and labels; in the first phase, before they
// are stored, the bundle alone is in force. A rotation started before
// digests were recorded reads its Secret as it is.
func TestRotationCAsAreThoseRecorded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	data, err := secretsbundle.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}, Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0"}}
	cluster.Status.SecretsDigest = secretsbundle.Digest(data)
	bundle := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets", Namespace: "ns"}, Data: map[string][]byte{secretsbundle.BundleKey: data}}
	ours, err := secretsbundle.NewRotationCAs(cluster, true, false, now)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := secretsbundle.NewRotationCAs(cluster, true, false, now)
	if err != nil {
		t.Fatal(err)
	}
	rotating := func(phase v1alpha1.CARotationPhase, digest string) *v1alpha1.TalosCluster {
		c := cluster.DeepCopy()
		c.Status.CARotation = &v1alpha1.CARotationStatus{Operation: "rotate", Phase: phase, Talos: true, SecretDigest: digest}
		return c
	}

	c := fake.NewClientBuilder().WithObjects(bundle).Build()
	// Recorded, not stored yet.
	in, err := Load(ctx, c, rotating(v1alpha1.CARotationAcceptNew, ours.Digest))
	if err != nil || len(in.TalosAccepted) != 0 {
		t.Fatalf("the first phase before its CAs are stored: %v, accepted %d", err, len(in.TalosAccepted))
	}
	if _, err := Load(ctx, c, rotating(v1alpha1.CARotationIssueNew, ours.Digest)); err == nil {
		t.Fatal("the second phase without its CAs' Secret loaded")
	}
	// Someone else's CAs in their place.
	if err := StoreRotationCAs(ctx, c, cluster, theirs); err != nil {
		t.Fatal(err)
	}
	for _, phase := range v1alpha1.CARotationPhases {
		_, err := Load(ctx, c, rotating(phase, ours.Digest))
		var refusal *Refusal
		if !errors.As(err, &refusal) || refusal.Reason != v1alpha1.ClusterReasonSecretDigestMismatch {
			t.Fatalf("phase %s with CAs not recorded: %v", phase, err)
		}
	}
	if err := StoreRotationCAs(ctx, c, cluster, ours); err == nil {
		t.Fatal("stored over a Secret that is not the rotation's")
	}
	// A rotation from before digests: as it is.
	in, err = Load(ctx, c, rotating(v1alpha1.CARotationIssueNew, ""))
	if err != nil || string(in.Certs.OS.Crt) != string(theirs.Talos.Crt) {
		t.Fatalf("a rotation without a digest: %v", err)
	}
	// The rotation's own.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets-ca-next", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	if err := StoreRotationCAs(ctx, c, cluster, ours); err != nil {
		t.Fatal(err)
	}
	in, err = Load(ctx, c, rotating(v1alpha1.CARotationIssueNew, ours.Digest))
	if err != nil || string(in.Certs.OS.Crt) != string(ours.Talos.Crt) {
		t.Fatalf("the rotation's own CAs: %v", err)
	}
}
