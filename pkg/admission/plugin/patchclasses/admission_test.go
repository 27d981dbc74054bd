package patchclasses

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// overridden is a stored harmless patch on which an admin granted an override of check.
func overridden(check ichor.SafetyCheck) *ichor.TalosConfigPatch {
	p := &ichor.TalosConfigPatch{Spec: ichor.TalosConfigPatchSpec{ClusterName: "prod", Patch: "machine: {}\n"}}
	p.Status.Override = &ichor.OverrideStatus{Check: check, By: "carol", Reason: "rotating by hand"}
	return p
}

func TestValidate(t *testing.T) {
	patches := schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "talosconfigpatches"}
	kind := schema.GroupVersionKind{Group: "ichor.dev", Version: "v1alpha1", Kind: "TalosConfigPatch"}
	obj := func(patch string) *ichor.TalosConfigPatch {
		return &ichor.TalosConfigPatch{Spec: ichor.TalosConfigPatchSpec{ClusterName: "prod", Patch: patch}}
	}
	const caPatch = "cluster:\n  ca:\n    crt: Zm9v\n    key: YmFy\n"
	const jsonPatch = `[{"op": "replace", "path": "/machine/token", "value": "x"}]`

	for _, tc := range []struct {
		name    string
		op      admission.Operation
		obj     runtime.Object
		old     runtime.Object
		sub     string
		wantErr string
	}{
		{name: "harmless create", op: admission.Create, obj: obj("machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n")},
		{name: "cluster CA", op: admission.Create, obj: obj(caPatch), wantErr: "touches the cluster's secrets bundle (cluster.ca)"},
		{name: "JSON6902 token", op: admission.Create, obj: obj(jsonPatch), wantErr: "machine.token"},
		{name: "update that adds a secret", op: admission.Update, obj: obj(caPatch), old: obj("machine: {}\n"), wantErr: "cluster.ca"},
		{name: "update that keeps the patch", op: admission.Update, obj: obj(caPatch), old: obj(caPatch)},
		{name: "status is not a patch write", op: admission.Update, obj: obj(caPatch), old: obj("machine: {}\n"), sub: "status"},
		{name: "update past a granted override", op: admission.Update, obj: obj(caPatch), old: overridden(ichor.CheckPatchSecrets)},
		{name: "an override of another check does not count", op: admission.Update, obj: obj(caPatch), old: overridden(ichor.CheckControlPlaneQuorum),
			wantErr: "an admin may let one change of an existing patch through with its override subresource (check PatchSecrets)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := admission.NewAttributesRecord(tc.obj, tc.old, kind, "ns", "p1", patches, tc.sub, tc.op, nil, false, &user.DefaultInfo{Name: "bob"})
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return authorizer.DecisionAllow, "", nil // the bundle check holds whatever the requester's rights
			}))
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "spec.patch")):
				t.Fatalf("error = %v, want Invalid on spec.patch containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestPrivilegedNeedsItsVerb: an operator (no privileged verb) may write
// settings but not a static pod, in any form, nor retarget, enable or
// delete an admin's privileged patch; an admin may.
func TestPrivilegedNeedsItsVerb(t *testing.T) {
	patches := schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "talosconfigpatches"}
	kind := schema.GroupVersionKind{Group: "ichor.dev", Version: "v1alpha1", Kind: "TalosConfigPatch"}
	obj := func(patch string, disabled bool) *ichor.TalosConfigPatch {
		return &ichor.TalosConfigPatch{Spec: ichor.TalosConfigPatchSpec{ClusterName: "prod", Patch: patch, Disabled: disabled}}
	}
	const pod = "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
	const podJSON = `[{"op": "add", "path": "/machine/pods", "value": [{"apiVersion": "v1", "kind": "Pod"}]}]`
	const setting = "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"
	operator := &user.DefaultInfo{Name: "olivia", Groups: []string{ichor.GroupOperator}}
	admin := &user.DefaultInfo{Name: "carol", Groups: []string{ichor.GroupAdmin}}
	for _, tc := range []struct {
		name     string
		op       admission.Operation
		obj, old *ichor.TalosConfigPatch
		who      user.Info
		wantErr  string
	}{
		{name: "operator writes a setting", op: admission.Create, obj: obj(setting, false), who: operator},
		{name: "operator writes a static pod", op: admission.Create, obj: obj(pod, false), who: operator,
			wantErr: `user "olivia" cannot create TalosConfigPatch p1: it writes fields that run code with the nodes' privileges or change whom they trust: machine.pods (static pods run with the node's privileges)`},
		{name: "operator writes a static pod as JSON6902", op: admission.Create, obj: obj(podJSON, false), who: operator, wantErr: "machine.pods"},
		{name: "operator enables an admin's static pod", op: admission.Update, obj: obj(pod, false), old: obj(pod, true), who: operator, wantErr: "cannot change"},
		{name: "operator deletes an admin's static pod", op: admission.Delete, old: obj(pod, false), who: operator, wantErr: "cannot delete"},
		{name: "operator deletes a setting", op: admission.Delete, old: obj(setting, false), who: operator},
		{name: "operator relabels an admin's static pod", op: admission.Update, obj: obj(pod, false), old: obj(pod, false), who: operator},
		{name: "admin writes a static pod", op: admission.Create, obj: obj(pod, false), who: admin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o, old runtime.Object
			if tc.obj != nil {
				o = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			attrs := admission.NewAttributesRecord(o, old, kind, "ns", "p1", patches, "", tc.op, nil, false, tc.who)
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetVerb() != ichor.VerbUpdate || a.GetSubresource() != ichor.PrivilegedPatchSubresource {
					t.Errorf("asked %s %s/%s", a.GetVerb(), a.GetResource(), a.GetSubresource())
				}
				if a.GetUser().GetName() == "carol" {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
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
