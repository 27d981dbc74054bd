package ichor_test

import (
	"slices"
	"strings"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestDownloads: every download is complete and listed once, and the
// CredentialPurpose constants of the internal and the versioned API are
// exactly the downloads' purposes.
func TestDownloads(t *testing.T) {
	var purposes []string
	for _, d := range ichor.Downloads {
		if strings.Count(d.File, "%s") != 1 || d.ContentType == "" || d.Streams == "" || !strings.HasPrefix(d.TalosRole, "os:") {
			t.Errorf("%s is incomplete: %+v", d.Path(), d)
		}
		if d.Role != ichor.UserRoleOperator && d.Role != ichor.UserRoleAdmin {
			t.Errorf("%s: download is held by operators or admins, not %q", d.Path(), d.Role)
		}
		if slices.Contains(purposes, d.Subresource) {
			t.Errorf("%s is listed twice", d.Subresource)
		}
		purposes = append(purposes, d.Subresource)
	}
	slices.Sort(purposes)
	for _, file := range []string{"types_credentialrequest.go", "v1alpha1/types_credentialrequest.go"} {
		if got := slices.Sorted(slices.Values(constantsOf(t, file, "CredentialPurpose"))); !slices.Equal(got, purposes) {
			t.Errorf("the CredentialPurpose constants of %s are %v; ichor.Downloads has %v", file, got, purposes)
		}
	}
}
