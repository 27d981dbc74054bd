package patchsecrets

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

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
		{name: "harmless create", op: admission.Create, obj: obj("machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n")},
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
			err := New().Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "spec.patch")):
				t.Fatalf("error = %v, want Invalid on spec.patch containing %q", err, tc.wantErr)
			}
		})
	}
}
