package cli

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Each conflict the servers report gets the hint for its state, from the
// messages they write (pkg/registry, pkg/admission, kube-apiserver).
func TestExplainConflicts(t *testing.T) {
	conflict := func(resource, name, why string) error {
		return apierrors.NewConflict(schema.GroupResource{Group: "ichor.dev", Resource: resource}, name, errors.New(why))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{conflict("talosoperations", "up", "it was already started by carol at 2026-12-05T10:00:00Z"), "create a new TalosOperation"},
		{conflict("machinereclaims", "w6", "it was already started by carol at 2026-12-05T10:00:00Z"), "create a new MachineReclaim"},
		{conflict("talosmachines", "m1", "it is not a configured member of a cluster, so it has nothing to download"), "Wait until the machine is configured"},
		{conflict("talosclusters", "demo", "it has no configured control plane yet, so a talosconfig would have no endpoint"), "ichor wait taloscluster/NAME --for Ready"},
		{conflict("taloscredentialrequests", "r", "it was deleted before the controller answered it"), "Is ichor-controller running?"},
		{conflict("talosmachines", "m1", "the object has been modified; please apply your changes to the latest version and try again"), "read it again"},
		{apierrors.NewApplyConflict(nil, "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.role"), "--force-conflicts"},
		{conflict("ichorusers", "ada", "the other admins kept changing while this deletion checked that one remains; try again"), "Run the command again."},
		{conflict("talosclusters", "demo", "something new"), "see kubectl describe"},
	} {
		got := Explain(tc.err)
		if !strings.HasPrefix(got, tc.err.Error()) || !strings.HasSuffix(got, strings.Split(got, "\n")[1]) || !strings.Contains(strings.Split(got, "\n")[1], tc.want) {
			t.Errorf("Explain(%v) = %q, want the message and a hint saying %q", tc.err, got, tc.want)
		}
	}
}
