package artifacts

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestRolesHoldTheVerbsTable: each default role of roles.yaml holds every
// verb of ichor.CustomVerbs (and the verbs alongside it) exactly where the
// table says it does, with the operation types and downloads of their
// tables, and the other ClusterRoles a row names hold it too.
func TestRolesHoldTheVerbsTable(t *testing.T) {
	rules, err := ClusterRoleRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range ichor.CustomVerbs {
		holders := ichor.RolesFrom(row.Role)
		for _, on := range row.On {
			for _, role := range ichor.UserRoles {
				want := slices.Contains(holders, role)
				for _, verb := range append([]string{row.Verb}, row.Alongside...) {
					if got := Allows(rules[ichor.ClusterRoleOf(role)], ichor.GroupName, verb, on); got != want {
						t.Errorf("%s %s: %s holds it: %v; ichor.CustomVerbs says %v", verb, on, ichor.ClusterRoleOf(role), got, want)
					}
				}
			}
			for _, other := range row.AlsoHeldBy {
				if !Allows(rules[other], ichor.GroupName, row.Verb, on) {
					t.Errorf("%s %s: %s does not hold it; ichor.CustomVerbs says it does", row.Verb, on, other)
				}
			}
		}
	}
}

// TestRolesGrantNothingBeyondTheVerbsTable: no ClusterRole of roles.yaml
// grants a custom verb, or update on a subresource, where ichor.CustomVerbs
// does not name it: an operation type or a download granted in roles.yaml
// alone fails here.
func TestRolesGrantNothingBeyondTheVerbsTable(t *testing.T) {
	rules, err := ClusterRoleRules()
	if err != nil {
		t.Fatal(err)
	}
	custom := []string{ichor.VerbApprove, ichor.VerbStart, ichor.VerbReclaim, ichor.VerbOverride, ichor.VerbDownload, ichor.VerbGrant, ichor.VerbAuthenticate}
	inTable := func(verb, on string) bool {
		for _, row := range ichor.CustomVerbs {
			if slices.Contains(row.On, on) && (row.Verb == verb || slices.Contains(row.Alongside, verb)) {
				return true
			}
		}
		return false
	}
	reported := map[string]bool{}
	for _, role := range slices.Sorted(maps.Keys(rules)) {
		for _, rule := range rules[role] {
			if !slices.Contains(rule.APIGroups, ichor.GroupName) {
				continue
			}
			for _, verb := range rule.Verbs {
				for _, on := range rule.Resources {
					checked := slices.Contains(custom, verb) || (verb == "update" && strings.Contains(on, "/") && !strings.HasSuffix(on, "/status"))
					if checked && !inTable(verb, on) && !reported[verb+" "+on] {
						reported[verb+" "+on] = true
						t.Errorf("%s grants %s on %s, which ichor.CustomVerbs does not name: add it to the table it comes from (ichor.Operations, ichor.Downloads, ichor.FieldSubresources) or take it out of roles.yaml", role, verb, on)
					}
				}
			}
		}
	}
}
