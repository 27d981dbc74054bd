package api

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestClusterFieldSubresources(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	admin := itest.APIClient(t)
	clusters := admin.IchorV1alpha1().TalosClusters(ns)
	c := itest.APITalosCluster("prod", ns)
	c.Spec.Network.CNI.Name = v1alpha1.CNICilium
	c, err := clusters.Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The main endpoint refuses the fields its subresources own, naming them.
	for _, tc := range []struct {
		field, subresource string
		mutate             func(*v1alpha1.TalosCluster)
	}{
		{"spec.ciliumValues", "talosclusters/cilium-values", func(c *v1alpha1.TalosCluster) { c.Spec.CiliumValues = "ipam: {mode: kubernetes}\n" }},
		{"spec.secretsRef", "talosclusters/secret-references", func(c *v1alpha1.TalosCluster) {
			c.Spec.SecretsRef = &v1alpha1.LocalSecretReference{Name: "mine"}
		}},
		{"spec.authentication", "talosclusters/authentication", func(c *v1alpha1.TalosCluster) {
			c.Spec.Authentication = &v1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com", ClientID: "k8s"}
		}},
		{"spec.security.secureBoot.installerImage", "talosclusters/installer-image", func(c *v1alpha1.TalosCluster) {
			c.Spec.Security.SecureBoot.InstallerImage = "factory.example/installer-secureboot/abc"
		}},
	} {
		changed := c.DeepCopy()
		tc.mutate(changed)
		_, err := clusters.Update(ctx, changed, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "changes only through the "+tc.subresource+" subresource") {
			t.Errorf("main-endpoint change of %s: want Invalid naming %s, got %v", tc.field, tc.subresource, err)
			continue
		}
		if got := itest.APICauseFields(t, err); len(got) != 1 || got[0] != tc.field {
			t.Errorf("causes %v, want [%s]", got, tc.field)
		}
	}

	// Through its subresource, only that field changes, and the generation moves on.
	body := c.DeepCopy()
	body.Spec.CiliumValues = "ipam: {mode: kubernetes}\n"
	body.Spec.TalosVersion = "v1.13.9"
	body.Labels = map[string]string{"sneaky": "yes"}
	got, err := itest.PutClusterSubresource(ctx, admin, body, "cilium-values")
	if err != nil {
		t.Fatalf("cilium-values: %v", err)
	}
	if got.Spec.CiliumValues != body.Spec.CiliumValues || got.Spec.TalosVersion != c.Spec.TalosVersion || got.Labels["sneaky"] != "" {
		t.Errorf("cilium-values wrote more than its field: spec %+v labels %v", got.Spec, got.Labels)
	}
	if got.Generation != c.Generation+1 {
		t.Errorf("generation after cilium-values = %d, want %d", got.Generation, c.Generation+1)
	}

	// The typed method of a subresource without a hyphen, and validation of the whole object.
	auth := got.DeepCopy()
	auth.Spec.Authentication = &v1alpha1.ClusterAuthentication{IssuerURL: "http://insecure.example.com", ClientID: "k8s"}
	if _, err := clusters.UpdateAuthentication(ctx, auth.Name, auth, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("authentication with an http issuer: want Invalid, got %v", err)
	}
	auth.Spec.Authentication.IssuerURL = "https://issuer.example.com"
	if got, err = clusters.UpdateAuthentication(ctx, auth.Name, auth, metav1.UpdateOptions{}); err != nil || got.Spec.Authentication == nil {
		t.Fatalf("authentication: %+v, %v", got, err)
	}

	// Each needs its own RBAC: operators hold none of them.
	operator := itest.APIClientFor(t, itest.CP.ConfigFor("bob", "ichor:operator"))
	body = got.DeepCopy()
	body.Spec.SecretsRef = &v1alpha1.LocalSecretReference{Name: "elsewhere"}
	if _, err := itest.PutClusterSubresource(ctx, operator, body, "secret-references"); !apierrors.IsForbidden(err) {
		t.Errorf("operator secret-references: want Forbidden, got %v", err)
	}
	if got, err := itest.PutClusterSubresource(ctx, admin, body, "secret-references"); err != nil || got.Spec.SecretsRef == nil || got.Spec.SecretsRef.Name != "elsewhere" {
		t.Errorf("admin secret-references: %+v, %v", got, err)
	}
}

func TestInstallationFieldSubresources(t *testing.T) {
	ctx := itest.APIContext(t)
	installations := itest.APIClient(t).IchorV1alpha1().IchorInstallations()
	in, err := installations.Create(ctx, itest.APIIchorInstallation(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = installations.Delete(context.Background(), in.Name, metav1.DeleteOptions{}) })

	changed := in.DeepCopy()
	changed.Spec.Settings.UsersEnabled = true
	if _, err := installations.Update(ctx, changed, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "ichorinstallations/settings subresource") {
		t.Fatalf("settings through the main endpoint: want Invalid naming the subresource, got %v", err)
	}

	changed.Spec.Version = "v9.9.9" // not the settings endpoint's to change
	got, err := installations.UpdateSettings(ctx, in.Name, changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("settings: %v", err)
	}
	if !got.Spec.Settings.UsersEnabled || got.Spec.Version != in.Spec.Version || got.Generation != in.Generation+1 {
		t.Errorf("after settings: %+v generation %d", got.Spec, got.Generation)
	}

	upgrade := got.DeepCopy()
	upgrade.Spec.Version = "v0.2.0"
	if got, err = installations.UpdateVersion(ctx, in.Name, upgrade, metav1.UpdateOptions{}); err != nil || got.Spec.Version != "v0.2.0" {
		t.Fatalf("version: %+v, %v", got, err)
	}

	viewerCfg := rest.CopyConfig(itest.CP.ConfigFor("alice", "ichor:viewer"))
	if _, err := itest.APIClientFor(t, viewerCfg).IchorV1alpha1().IchorInstallations().UpdateVersion(ctx, in.Name, got, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer version: want Forbidden, got %v", err)
	}
}
