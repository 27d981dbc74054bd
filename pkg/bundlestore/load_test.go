package bundlestore

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// TestLoadParsesOnceAVersion: Load reads the Secret each time, parses a
// content once, and a changed Secret is parsed anew; a Secret whose new
// content is broken is refused, never answered from the cache, and so is
// one whose content is not what status.secretsDigest records.
func TestLoadParsesOnceAVersion(t *testing.T) {
	ctx := context.Background()
	data, err := secretsbundle.Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets", Namespace: "ns", UID: "u1"}, Data: map[string][]byte{secretsbundle.BundleKey: data}}
	c := fake.NewClientBuilder().WithObjects(secret).Build()
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
		Status: v1alpha1.TalosClusterStatus{SecretsDigest: secretsbundle.Digest(data)}}
	first, err := Load(ctx, c, cluster)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(ctx, c, cluster)
	if err != nil || again.Bundle != first.Bundle {
		t.Fatalf("the same version was parsed again (%p, %p) or failed: %v", first, again, err)
	}
	other, err := secretsbundle.Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[secretsbundle.BundleKey] = other
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, c, cluster); err == nil {
		t.Fatal("a Secret changed behind the recorded digest was used")
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(other)
	changed, err := Load(ctx, c, cluster)
	if err != nil || changed == first || string(changed.Certs.OS.Crt) == string(first.Certs.OS.Crt) {
		t.Fatalf("a changed Secret gave the old bundle (%v)", err)
	}
	secret.Data[secretsbundle.BundleKey] = []byte("not a bundle")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(secret.Data[secretsbundle.BundleKey])
	if _, err := Load(ctx, c, cluster); err == nil {
		t.Fatal("a broken new version was answered from the cache")
	}
}
