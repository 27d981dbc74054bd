package taloscluster

import (
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// TestFieldSubresourcesOwnOnlyTheirField checks the reset fields derived from
// the versioned type: each subresource leaves status and every other spec
// field alone under server-side apply, and owns its own field.
func TestFieldSubresourcesOwnOnlyTheirField(t *testing.T) {
	owned := map[string]string{"cilium-values": "ciliumValues", "secret-references": "secretsRef", "authentication": "authentication"}
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
		if reset.Has(fieldpath.MakePathOrDie("spec", field)) || reset.Has(fieldpath.MakePathOrDie("spec")) {
			t.Errorf("%s resets the field it owns (spec.%s)", sub.Name, field)
		}
		for other := range owned {
			if f := owned[other]; f != field && !reset.Has(fieldpath.MakePathOrDie("spec", f)) {
				t.Errorf("%s does not reset spec.%s, which %s owns", sub.Name, f, other)
			}
		}
	}
}
