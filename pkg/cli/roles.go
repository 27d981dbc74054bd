package cli

import (
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"

	"ichor.dev/ichor/artifacts"
	"ichor.dev/ichor/pkg/apis/ichor"
)

// userRoles are Ichor's user roles, lowest first, and the groups bound to them.
var userRoles = []struct{ role, group string }{
	{"ichor-viewer", ichor.GroupViewer},
	{"ichor-operator", ichor.GroupOperator},
	{"ichor-admin", ichor.GroupAdmin},
}

var (
	rolesOnce sync.Once
	roleRules map[string][]rbacv1.PolicyRule // by role, aggregated
)

// loadRoles reads the rules each user role aggregates from roles.yaml.
func loadRoles() map[string][]rbacv1.PolicyRule {
	rolesOnce.Do(func() {
		// The embedded file is checked by its test.
		roleRules, _ = artifacts.ClusterRoleRules()
	})
	return roleRules
}

// lowestHolder is the lowest user role (and its group) whose rules allow
// verb on resource ("talosmachines/approval") in ichor.dev, for any name.
func lowestHolder(verb, resource string) (role, group string) {
	rules := loadRoles()
	for _, r := range userRoles {
		if artifacts.Allows(rules[r.role], ichor.GroupName, verb, resource) {
			return r.role, r.group
		}
	}
	return "", ""
}
