package artifacts

import (
	"bytes"
	"errors"
	"io"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// ClusterRoleRules are the rules of each ClusterRole of roles.yaml, by name:
// an aggregated role's are those of the roles its selectors match, as
// kube-controller-manager's aggregation fills them in.
func ClusterRoleRules() (map[string][]rbacv1.PolicyRule, error) {
	var all []rbacv1.ClusterRole
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(Roles), 4096)
	for {
		var r rbacv1.ClusterRole
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if r.Kind == "ClusterRole" {
			all = append(all, r)
		}
	}
	rules := map[string][]rbacv1.PolicyRule{}
	for _, role := range all {
		if role.AggregationRule == nil {
			rules[role.Name] = append(rules[role.Name], role.Rules...)
			continue
		}
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			s := labels.SelectorFromSet(sel.MatchLabels)
			for _, r := range all {
				if r.AggregationRule == nil && s.Matches(labels.Set(r.Labels)) {
					rules[role.Name] = append(rules[role.Name], r.Rules...)
				}
			}
		}
	}
	return rules, nil
}

// Allows reports whether rules allow verb on resource ("talosmachines/approval")
// of apiGroup, for any name.
func Allows(rules []rbacv1.PolicyRule, apiGroup, verb, resource string) bool {
	has := func(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
	for _, rule := range rules {
		if len(rule.ResourceNames) == 0 && has(rule.APIGroups, apiGroup) && has(rule.Verbs, verb) && has(rule.Resources, resource) {
			return true
		}
	}
	return false
}
