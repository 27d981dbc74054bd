package patchclasses

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestMachineLabelsAndPrivilegedPatches: an operator (no privileged verb)
// may not move a privileged patch onto or off a machine by its labels, its
// name or its cluster, on create or update; labels that move only plain
// patches, or none, are the operator's; an admin may do all of it.
func TestMachineLabelsAndPrivilegedPatches(t *testing.T) {
	const pod = "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
	const setting = "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"
	patch := func(name, cluster, text string, target v1alpha1.PatchTarget, disabled bool) *v1alpha1.TalosConfigPatch {
		return &v1alpha1.TalosConfigPatch{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: cluster, Target: target, Patch: text, Disabled: disabled},
		}
	}
	pool := func(v string) v1alpha1.PatchTarget {
		return v1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": v}}}
	}
	patches := []*v1alpha1.TalosConfigPatch{
		patch("gpu-pods", "prod", pod, pool("gpu"), false),
		patch("plain", "prod", setting, pool("plain"), false),
		patch("old-pods", "prod", pod, pool("old"), true),
		patch("named", "prod", pod, v1alpha1.PatchTarget{Machines: []string{"m9"}}, false),
		patch("everyone", "prod", pod, v1alpha1.PatchTarget{}, false),
		patch("workers", "prod", pod, v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleWorker}, false),
		patch("hardening", "prod", pod, v1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist}}}}, false),
		patch("theirs", "other", pod, pool("gpu"), false),
	}
	machine := func(name, cluster string, labels map[string]string) *ichor.TalosMachine {
		return &ichor.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
			Spec:       ichor.TalosMachineSpec{ClusterName: cluster, Role: ichor.MachineRoleWorker, Address: "10.5.0.10:50000"},
		}
	}
	gpu := map[string]string{"pool": "gpu"}
	operator := &user.DefaultInfo{Name: "olivia", Groups: []string{ichor.GroupOperator}}
	admin := &user.DefaultInfo{Name: "carol", Groups: []string{ichor.GroupAdmin}}
	for _, tc := range []struct {
		name     string
		obj, old *ichor.TalosMachine
		who      user.Info
		wantErr  string
	}{
		{name: "create without labels", obj: machine("m1", "prod", nil), who: operator},
		{name: "create into a plain patch", obj: machine("m1", "prod", map[string]string{"pool": "plain"}), who: operator},
		{name: "create into a privileged patch", obj: machine("m1", "prod", gpu), who: operator,
			wantErr: `user "olivia" cannot create TalosMachine m1: its name or labels change which privileged TalosConfigPatches select it (gpu-pods would start selecting it); that needs the "update" verb on talosconfigpatches/privileged`},
		{name: "create a machine a privileged patch names", obj: machine("m9", "prod", nil), who: operator, wantErr: "named would start selecting it"},
		{name: "create out of a hardening patch", obj: machine("m1", "prod", map[string]string{"legacy": "y"}), who: operator, wantErr: "hardening would stop selecting it"},
		{name: "create unassigned", obj: machine("m1", "", gpu), who: operator},
		{name: "admin creates into a privileged patch", obj: machine("m1", "prod", gpu), who: admin},
		{name: "relabel into a privileged patch", obj: machine("m1", "prod", gpu), old: machine("m1", "prod", nil), who: operator,
			wantErr: `cannot relabel TalosMachine m1: its labels change which privileged TalosConfigPatches select it (gpu-pods would start selecting it)`},
		{name: "relabel out of a privileged patch", obj: machine("m1", "prod", nil), old: machine("m1", "prod", gpu), who: operator, wantErr: "gpu-pods would stop selecting it"},
		{name: "relabel into a disabled privileged patch", obj: machine("m1", "prod", map[string]string{"pool": "old"}), old: machine("m1", "prod", nil), who: operator,
			wantErr: "old-pods would start selecting it"},
		{name: "relabel beside a privileged patch's label", obj: machine("m1", "prod", map[string]string{"pool": "gpu", "team": "a"}), old: machine("m1", "prod", gpu), who: operator},
		{name: "relabel into a plain patch", obj: machine("m1", "prod", map[string]string{"pool": "plain"}), old: machine("m1", "prod", nil), who: operator},
		{name: "assign to a cluster inside a privileged patch", obj: machine("m1", "prod", gpu), old: machine("m1", "", gpu), who: operator,
			wantErr: `cannot update TalosMachine m1: its labels or cluster change`},
		{name: "assign to a cluster", obj: machine("m1", "prod", nil), old: machine("m1", "", nil), who: operator},
		{name: "admin relabels into a privileged patch", obj: machine("m1", "prod", gpu), old: machine("m1", "prod", nil), who: admin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			// Tracked under their resource by name: given up front, the
			// tracker would guess it as talosconfigpatchs.
			client := fake.NewSimpleClientset()
			for _, patch := range patches {
				if err := client.Tracker().Create(v1alpha1.SchemeGroupVersion.WithResource("talosconfigpatches"), patch, "ns"); err != nil {
					t.Fatal(err)
				}
			}
			p.SetIchorClient(client)
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetVerb() != ichor.VerbUpdate || a.GetResource() != "talosconfigpatches" || a.GetSubresource() != ichor.PrivilegedPatchSubresource || a.GetName() == "" {
					t.Errorf("asked %s %s/%s %q", a.GetVerb(), a.GetResource(), a.GetSubresource(), a.GetName())
				}
				if a.GetUser().GetName() == "carol" {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			op := admission.Create
			var old runtime.Object
			if tc.old != nil {
				op, old = admission.Update, tc.old
			}
			attrs := admission.NewAttributesRecord(tc.obj, old, schema.GroupVersionKind{Group: "ichor.dev", Version: "v1alpha1", Kind: "TalosMachine"},
				"ns", tc.obj.Name, schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "talosmachines"}, "", op, nil, false, tc.who)
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
