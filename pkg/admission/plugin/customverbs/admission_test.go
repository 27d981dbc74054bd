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

	"ichor.dev/ichor/pkg/apis/ichor"
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

func TestValidateCredentialPurpose(t *testing.T) {
	requests := schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "taloscredentialrequests"}
	bob := &user.DefaultInfo{Name: "bob"}
	tcr := func(purpose ichor.CredentialPurpose, machines ...string) *ichor.TalosCredentialRequest {
		return &ichor.TalosCredentialRequest{Spec: ichor.TalosCredentialRequestSpec{ClusterName: "prod", Purpose: purpose, Machines: machines}}
	}
	// The authorizer allows downloads of the reader talosconfig of prod and the etcd snapshot of m1 only.
	allowed := map[string]bool{"talosclusters/talosconfig-reader/prod": true, "talosmachines/etcd-snapshot/m1": true}

	for _, tc := range []struct {
		name    string
		obj     *ichor.TalosCredentialRequest
		wantErr string
	}{
		{name: "reader talosconfig of the cluster", obj: tcr(ichor.PurposeTalosconfigReader)},
		{name: "snapshot of an allowed machine", obj: tcr(ichor.PurposeEtcdSnapshot, "m1")},
		{name: "snapshot of a machine not granted", obj: tcr(ichor.PurposeEtcdSnapshot, "m1", "m2"),
			wantErr: `user "bob" cannot request a etcd-snapshot credential: it needs the "download" verb on talosmachines/etcd-snapshot "m2"`},
		{name: "snapshot of every machine", obj: tcr(ichor.PurposeEtcdSnapshot),
			wantErr: "talosmachines/etcd-snapshot of every machine in the namespace"},
		{name: "packet capture not granted", obj: tcr(ichor.PurposePacketCapture, "m1"), wantErr: `needs the "download" verb on talosmachines/packet-capture "m1"`},
		{name: "unknown purpose", obj: tcr("root-shell"), wantErr: `purpose "root-shell" grants no credential`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetVerb() == VerbDownload && allowed[a.GetResource()+"/"+a.GetSubresource()+"/"+a.GetName()] {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			attrs := admission.NewAttributesRecord(tc.obj, nil, schema.GroupVersionKind{}, "ns", "r1", requests, "", admission.Create, nil, false, bob)
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}
