package credentialrequest

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// Every purpose certifies a role Talos knows, below os:admin but for the
// new admin credentials of a CA rotation, which only the admins' download
// of talosclusters/credentials stands for.
func TestPurposesCertifyKnownRoles(t *testing.T) {
	for purpose, rule := range ichor.CredentialPurposes {
		set, unknown := role.Parse([]string{rule.TalosRole})
		if len(unknown) > 0 || !set.Includes(role.Role(rule.TalosRole)) {
			t.Errorf("%s certifies %q, which Talos does not know", purpose, rule.TalosRole)
		}
		if len(rule.Rights) == 0 {
			t.Errorf("%s: role %s with no right asked", purpose, rule.TalosRole)
		}
		admin := role.Role(rule.TalosRole) == role.Admin
		if admin != (purpose == ichor.PurposeCredentials) {
			t.Errorf("%s certifies %s", purpose, rule.TalosRole)
		}
		if admin && (len(rule.Rights) != 1 || rule.Rights[0] != (ichor.PurposeRight{Verb: ichor.VerbDownload, Resource: "talosclusters", Subresource: "credentials"})) {
			t.Errorf("%s: os:admin for %+v", purpose, rule.Rights)
		}
	}
}
