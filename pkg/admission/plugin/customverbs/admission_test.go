package customverbs

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestValidate(t *testing.T) {
	machines := schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "talosmachines"}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"ichor:operator"}}

	for _, tc := range []struct {
		name        string
		gvr         schema.GroupVersionResource
		subresource string
		op          admission.Operation
		decision    authorizer.Decision
		wantAsked   bool
		wantErr     string
	}{
		{name: "approval allowed", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionAllow, wantAsked: true},
		{name: "approval denied", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionDeny, wantAsked: true,
			wantErr: `user "bob" cannot approve talosmachines/approval "m1": it needs the "approve" verb on resource "talosmachines", subresource "approval": no rule`},
		{name: "approval with no opinion", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionNoOpinion, wantAsked: true,
			wantErr: `needs the "approve" verb`},
		{name: "status is no action", gvr: machines, subresource: "status", op: admission.Update, decision: authorizer.DecisionDeny},
		{name: "main resource is no action", gvr: machines, op: admission.Update, decision: authorizer.DecisionDeny},
		{name: "create of approval is not guarded here", gvr: machines, subresource: "approval", op: admission.Create, decision: authorizer.DecisionDeny},
		{name: "other group", gvr: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "talosmachines"}, subresource: "approval",
			op: admission.Update, decision: authorizer.DecisionDeny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				return tc.decision, "no rule", nil
			}))
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			attrs := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, "prod", "m1", tc.gvr, tc.subresource, tc.op, nil, false, bob)

			err := p.Validate(context.Background(), attrs, nil)

			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
			if got := len(asked) > 0; got != tc.wantAsked {
				t.Fatalf("authorizer asked = %v, want %v", got, tc.wantAsked)
			}
			if tc.wantAsked {
				a := asked[0]
				if a.GetVerb() != VerbApprove || a.GetResource() != "talosmachines" || a.GetSubresource() != "approval" ||
					a.GetName() != "m1" || a.GetNamespace() != "prod" || a.GetAPIGroup() != "ichor.dev" || !a.IsResourceRequest() ||
					a.GetUser().GetName() != "bob" {
					t.Fatalf("asked %+v", a)
				}
			}
		})
	}
}

func TestValidateInitializationNeedsAnAuthorizer(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("a plugin without an authorizer initialized")
	}
}
