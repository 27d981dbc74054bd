package upload

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestPath(t *testing.T) {
	p := Path("team-a", "from-laptop")
	if got, ok := ParsePath(p); !ok || got != (types.NamespacedName{Namespace: "team-a", Name: "from-laptop"}) {
		t.Fatalf("ParsePath(%q) = %v, %v", p, got, ok)
	}
	for _, bad := range []string{
		"/", "/uploads/ichor.dev/namespaces/team-a/talosbackups/", "/uploads/ichor.dev/namespaces//talosbackups/x",
		"/uploads/ichor.dev/namespaces/team-a/talosoperations/x", "/uploads/ichor.dev/namespaces/team-a/talosbackups/x/y",
		"/uploads/other/namespaces/team-a/talosbackups/x",
	} {
		if got, ok := ParsePath(bad); ok {
			t.Errorf("ParsePath(%q) = %v, want refused", bad, got)
		}
	}
}
