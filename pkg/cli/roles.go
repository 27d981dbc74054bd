package cli

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/yaml"

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
		var all []rbacv1.ClusterRole
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(artifacts.Roles), 4096)
		for {
			var r rbacv1.ClusterRole
			err := dec.Decode(&r)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return // the embedded file is checked by its test
			}
			if r.Kind == "ClusterRole" {
				all = append(all, r)
			}
		}
		roleRules = map[string][]rbacv1.PolicyRule{}
		for _, agg := range all {
			if agg.AggregationRule == nil {
				continue
			}
			for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
				s := labels.SelectorFromSet(sel.MatchLabels)
				for _, r := range all {
					if r.AggregationRule == nil && s.Matches(labels.Set(r.Labels)) {
						roleRules[agg.Name] = append(roleRules[agg.Name], r.Rules...)
					}
				}
			}
		}
	})
	return roleRules
}

// lowestHolder is the lowest user role (and its group) whose rules allow
// verb on resource ("talosmachines/approval") in ichor.dev, for any name.
func lowestHolder(verb, resource string) (role, group string) {
	rules := loadRoles()
	for _, r := range userRoles {
		for _, rule := range rules[r.role] {
			if len(rule.ResourceNames) == 0 && has(rule.APIGroups, ichor.GroupName) && has(rule.Verbs, verb) && has(rule.Resources, resource) {
				return r.role, r.group
			}
		}
	}
	return "", ""
}

func has(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
