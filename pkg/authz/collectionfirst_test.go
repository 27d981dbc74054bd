package authz

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// grants answers like RBAC with two rules: status updates of every
// TalosMachine in ns "a", and download of the support bundle of "m1" only.
// It records every question it was asked.
type grants struct{ asked []authorizer.AttributesRecord }

func (g *grants) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	switch r := a.(type) {
	case authorizer.AttributesRecord:
		g.asked = append(g.asked, r)
	case *authorizer.AttributesRecord:
		g.asked = append(g.asked, *r)
	}
	switch {
	case a.GetNamespace() == "a" && a.GetResource() == "talosmachines" && a.GetSubresource() == "status" && a.GetVerb() == "update":
		return authorizer.DecisionAllow, "status writer", nil
	case a.GetResource() == "talosmachines" && a.GetSubresource() == "support-bundle" && a.GetVerb() == "download" && a.GetName() == "m1":
		return authorizer.DecisionAllow, "bundle of m1", nil
	case a.GetVerb() == "delete":
		return authorizer.DecisionNoOpinion, "", errors.New("webhook down")
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

func machine(verb, ns, sub, name string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "carol"}, Verb: verb, Namespace: ns, APIGroup: "ichor.dev", APIVersion: "v1alpha1",
		Resource: "talosmachines", Subresource: sub, Name: name, ResourceRequest: true,
		Path: "/apis/ichor.dev/v1alpha1/namespaces/" + ns + "/talosmachines/" + name,
	}
}

func TestCollectionFirst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		attrs      authorizer.Attributes
		want       authorizer.Decision
		wantReason string
		wantErr    bool
		// wantNames are the object names asked about, in order.
		wantNames []string
	}{
		{"allowed for every object: one question, without the name",
			machine("update", "a", "status", "m7"), authorizer.DecisionAllow, "status writer", false, []string{""}},
		{"allowed by name only: asked again with the name",
			machine("download", "a", "support-bundle", "m1"), authorizer.DecisionAllow, "bundle of m1", false, []string{"", "m1"}},
		{"another name of a by-name grant is refused",
			machine("download", "a", "support-bundle", "m2"), authorizer.DecisionNoOpinion, "no rule", false, []string{"", "m2"}},
		{"a grant in one namespace is not one in another",
			machine("update", "b", "status", "m7"), authorizer.DecisionNoOpinion, "no rule", false, []string{"", "m7"}},
		{"the named answer's error is kept",
			machine("delete", "a", "", "m1"), authorizer.DecisionNoOpinion, "", true, []string{"", "m1"}},
		{"a request without a name is asked once, as it is",
			machine("list", "a", "", ""), authorizer.DecisionNoOpinion, "no rule", false, []string{""}},
		{"another group's request is asked once, as it is",
			&authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "carol"}, Verb: "impersonate", Resource: "users", Name: "alice", ResourceRequest: true},
			authorizer.DecisionNoOpinion, "no rule", false, []string{"alice"}},
		{"a non-resource request is asked once, as it is",
			&authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "carol"}, Verb: "get", Path: "/healthz"},
			authorizer.DecisionNoOpinion, "no rule", false, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &grants{}
			d, reason, err := CollectionFirst(authorizer.AuthorizerFunc(g.authorize), "ichor.dev").Authorize(context.Background(), tc.attrs)
			if d != tc.want || reason != tc.wantReason || (err != nil) != tc.wantErr {
				t.Errorf("Authorize = %v, %q, %v; want %v, %q, error %t", d, reason, err, tc.want, tc.wantReason, tc.wantErr)
			}
			var names []string
			for _, a := range g.asked {
				names = append(names, a.Name)
			}
			if len(names) != len(tc.wantNames) {
				t.Fatalf("asked about names %q, want %q", names, tc.wantNames)
			}
			for i := range names {
				if names[i] != tc.wantNames[i] {
					t.Fatalf("asked about names %q, want %q", names, tc.wantNames)
				}
			}
			// The collection question keeps everything but the name (and the object's path).
			if first, orig := g.asked[0], tc.attrs; orig.IsResourceRequest() && orig.GetName() != "" {
				if first.User != orig.GetUser() || first.Verb != orig.GetVerb() || first.Namespace != orig.GetNamespace() ||
					first.APIGroup != orig.GetAPIGroup() || first.APIVersion != orig.GetAPIVersion() ||
					first.Resource != orig.GetResource() || first.Subresource != orig.GetSubresource() || !first.ResourceRequest || first.Path != "" {
					t.Errorf("collection question %+v does not match the request %+v", first, orig)
				}
			}
		})
	}
}

func TestCollectionFirstConditionsAware(t *testing.T) {
	g := &grants{}
	a := CollectionFirst(authorizer.AuthorizerFunc(g.authorize), "ichor.dev")
	if d := a.ConditionsAwareAuthorize(context.Background(), machine("update", "a", "status", "m7")); !d.IsAllow() || len(g.asked) != 1 {
		t.Errorf("collection-wide grant: %+v after %d questions, want allowed after one", d, len(g.asked))
	}
	g.asked = nil
	if d := a.ConditionsAwareAuthorize(context.Background(), machine("download", "a", "support-bundle", "m2")); d.IsAllow() || len(g.asked) != 2 {
		t.Errorf("no grant: %+v after %d questions, want refused after two", d, len(g.asked))
	}
}
