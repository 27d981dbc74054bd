package clustersecrets

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestGenerateThenParse(t *testing.T) {
	data, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := parse(data)
	if err != nil {
		t.Fatalf("parse a generated bundle: %v", err)
	}
	if b.Certs == nil || b.Certs.OS == nil || len(b.Certs.OS.Key) == 0 || b.Secrets.BootstrapToken == "" {
		t.Fatalf("generated bundle lacks the Talos CA or a bootstrap token")
	}
	// Two bundles never share a CA.
	other, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if string(other) == string(data) {
		t.Fatal("two generated bundles are equal")
	}
}

func TestGenerateRefusesBadVersion(t *testing.T) {
	if _, err := Generate("latest", time.Now()); err == nil {
		t.Fatal("generated a bundle for version \"latest\"")
	}
}

func TestParseErrorsDoNotQuoteTheData(t *testing.T) {
	const secret = "s3cr3t-key-material"
	for name, data := range map[string]string{
		"not yaml":   "certs: [" + secret,
		"wrong type": "cluster: " + secret + "\n",
		"incomplete": "cluster:\n  id: " + secret + "\n",
		"empty":      "",
	} {
		_, err := parse([]byte(data))
		if err == nil {
			t.Errorf("%s: parsed", name)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the data: %v", name, err)
		}
	}
}

// TestLoadParsesOnceAVersion: Load reads the Secret each time, parses a
// content once, and a changed Secret is parsed anew; a Secret whose new
// content is broken is refused, never answered from the cache, and so is
// one whose content is not what status.secretsDigest records.
func TestLoadParsesOnceAVersion(t *testing.T) {
	ctx := context.Background()
	data, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets", Namespace: "ns", UID: "u1"}, Data: map[string][]byte{BundleKey: data}}
	c := fake.NewClientBuilder().WithObjects(secret).Build()
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
		Status: v1alpha1.TalosClusterStatus{SecretsDigest: Digest(data)}}
	first, err := Load(ctx, c, cluster)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(ctx, c, cluster)
	if err != nil || again.Bundle != first.Bundle {
		t.Fatalf("the same version was parsed again (%p, %p) or failed: %v", first, again, err)
	}
	other, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[BundleKey] = other
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, c, cluster); err == nil {
		t.Fatal("a Secret changed behind the recorded digest was used")
	}
	cluster.Status.SecretsDigest = Digest(other)
	changed, err := Load(ctx, c, cluster)
	if err != nil || changed == first || string(changed.Certs.OS.Crt) == string(first.Certs.OS.Crt) {
		t.Fatalf("a changed Secret gave the old bundle (%v)", err)
	}
	secret.Data[BundleKey] = []byte("not a bundle")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cluster.Status.SecretsDigest = Digest(secret.Data[BundleKey])
	if _, err := Load(ctx, c, cluster); err == nil {
		t.Fatal("a broken new version was answered from the cache")
	}
}
