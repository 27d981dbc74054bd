package credentialrequest

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// Every purpose certifies a role Talos knows, and one below os:admin.
func TestPurposesCertifyKnownRoles(t *testing.T) {
	for purpose, rule := range ichor.CredentialPurposes {
		set, unknown := role.Parse([]string{rule.TalosRole})
		if len(unknown) > 0 || !set.Includes(role.Role(rule.TalosRole)) {
			t.Errorf("%s certifies %q, which Talos does not know", purpose, rule.TalosRole)
		}
		if role.Role(rule.TalosRole) == role.Admin || len(rule.Rights) == 0 {
			t.Errorf("%s: role %s with %d rights asked", purpose, rule.TalosRole, len(rule.Rights))
		}
	}
}
