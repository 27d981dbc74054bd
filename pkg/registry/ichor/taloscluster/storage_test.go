package taloscluster

import (
	"context"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestFieldSubresourcesOwnOnlyTheirField checks the reset fields derived from
// the versioned type: each subresource leaves status and every other spec
// field alone under server-side apply, and owns its own field.
func TestFieldSubresourcesOwnOnlyTheirField(t *testing.T) {
	owned := map[string]string{"cilium-values": "ciliumValues", "secret-references": "secretsRef", "authentication": "authentication",
		"backup": "backup", "kubernetes-version": "kubernetesVersion", "installer-image": "security.secureBoot.installerImage",
		"schematic": "schematic"}
	specPath := func(field string) fieldpath.Path {
		p := []any{"spec"}
		for _, f := range strings.Split(field, ".") {
			p = append(p, f)
		}
		return fieldpath.MakePathOrDie(p...)
	}
	if len(Definition.Subresources) != len(owned) {
		t.Fatalf("%d subresources, want %d", len(Definition.Subresources), len(owned))
	}
	for _, sub := range Definition.Subresources {
		reset := fieldpath.NewSet(sub.ResetFields...)
		field, ok := owned[sub.Name]
		if !ok {
			t.Fatalf("unexpected subresource %s", sub.Name)
		}
		for _, p := range []fieldpath.Path{
			fieldpath.MakePathOrDie("status"),
			fieldpath.MakePathOrDie("spec", "talosVersion"),
			fieldpath.MakePathOrDie("spec", "network"),
			fieldpath.MakePathOrDie("spec", "paused"),
		} {
			if !reset.Has(p) {
				t.Errorf("%s does not reset %s", sub.Name, p)
			}
		}
		// A field is reset when it or one of its parents is.
		resets := func(p fieldpath.Path) bool {
			for i := 1; i <= len(p); i++ {
				if reset.Has(p[:i]) {
					return true
				}
			}
			return false
		}
		if resets(specPath(field)) {
			t.Errorf("%s resets the field it owns (spec.%s)", sub.Name, field)
		}
		for other := range owned {
			if f := owned[other]; f != field && !resets(specPath(f)) {
				t.Errorf("%s does not reset spec.%s, which %s owns", sub.Name, f, other)
			}
		}
	}
}

// TestFieldSubresourcesWriteOnlyTheirField: a write through a field
// subresource takes that field from the request and keeps the rest of the
// spec and the status as stored, whatever else the request says.
func TestFieldSubresourcesWriteOnlyTheirField(t *testing.T) {
	stored := func() *ichor.TalosCluster {
		return &ichor.TalosCluster{
			Spec: ichor.TalosClusterSpec{TalosVersion: "v1.13.0", CiliumValues: "a: 1",
				SecretsRef: &ichor.LocalSecretReference{Name: "bundle"}, Authentication: &ichor.ClusterAuthentication{},
				Backup:   &ichor.ClusterBackup{Schedule: "@daily"},
				Security: ichor.ClusterSecurity{SecureBoot: ichor.SecureBootRequirement{Required: true, InstallerImage: "factory.example/installer-secureboot/abc"}}},
			Status: ichor.TalosClusterStatus{Phase: ichor.ClusterPhaseReady},
		}
	}
	request := func() *ichor.TalosCluster {
		return &ichor.TalosCluster{
			Spec: ichor.TalosClusterSpec{TalosVersion: "v1.99.0", CiliumValues: "b: 2",
				SecretsRef: &ichor.LocalSecretReference{Name: "other"},
				Security:   ichor.ClusterSecurity{SecureBoot: ichor.SecureBootRequirement{InstallerImage: "factory.example/installer-secureboot/def"}}},
			Status: ichor.TalosClusterStatus{Phase: ichor.ClusterPhaseDegraded},
		}
	}
	for _, sub := range Definition.Subresources {
		obj, old := request(), stored()
		sub.PrepareForUpdate(context.Background(), obj, old)
		want := stored()
		switch sub.Name {
		case "cilium-values":
			want.Spec.CiliumValues = "b: 2"
		case "secret-references":
			want.Spec.SecretsRef = &ichor.LocalSecretReference{Name: "other"}
		case "authentication":
			want.Spec.Authentication = nil
		case "backup":
			want.Spec.Backup = nil
		case "installer-image":
			want.Spec.Security.SecureBoot.InstallerImage = "factory.example/installer-secureboot/def"
		}
		if !apiequality.Semantic.DeepEqual(obj, want) {
			t.Errorf("%s wrote %+v, want %+v", sub.Name, obj, want)
		}
	}
}
