// Package talosconfigpatch stores TalosConfigPatches.
package talosconfigpatch

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/ichor/override"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosConfigPatches to the generic storage.
var Definition = &resource.Definition[*ichor.TalosConfigPatch]{
	Resource:        ichor.Resource("talosconfigpatches"),
	Singular:        "talosconfigpatch",
	NamespaceScoped: true,
	ShortNames:      []string{"tcp"},

	New:     func() *ichor.TalosConfigPatch { return &ichor.TalosConfigPatch{} },
	NewList: func() runtime.Object { return &ichor.TalosConfigPatchList{} },

	// A granted override is used by the next change of the patch, which
	// admission (IchorPatchSecrets) judged against the stored object.
	PrepareForUpdate: func(_ context.Context, p, old *ichor.TalosConfigPatch) {
		if !apiequality.Semantic.DeepEqual(p.Spec, old.Spec) {
			p.Status.Override = nil
		}
	},
	PrepareForStatusUpdate: func(_ context.Context, p, old *ichor.TalosConfigPatch) {
		override.KeepGranted(&p.Status.Override, old.Status.Override)
	},
	StatusResetFields: []fieldpath.Path{fieldpath.MakePathOrDie("status", "override")},
	Actions: []resource.Action[*ichor.TalosConfigPatch]{
		override.Action("TalosConfigPatch", []ichor.SafetyCheck{ichor.CheckPatchSecrets},
			func(p *ichor.TalosConfigPatch) **ichor.OverrideStatus { return &p.Status.Override }),
	},

	Validate:             validation.ValidateTalosConfigPatch,
	ValidateUpdate:       validation.ValidateTalosConfigPatchUpdate,
	ValidateStatusUpdate: validation.ValidateTalosConfigPatchStatusUpdate,

	SelectableFields: func(p *ichor.TalosConfigPatch) fields.Set {
		return fields.Set{"spec.clusterName": p.Spec.ClusterName}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster the patch belongs to."},
		{Name: "Target", Type: "string", Description: "Machines the patch applies to."},
		{Name: "Priority", Type: "integer", Description: "Order among patches of the same target kind."},
		{Name: "Effect", Type: "string", Description: "What applying the patch does to a node."},
		{Name: "Disabled", Type: "boolean", Description: "Whether the patch is left out of rendering."},
	},
	Cells: func(p *ichor.TalosConfigPatch) []any {
		return []any{p.Spec.ClusterName, target(&p.Spec.Target), p.Spec.Priority, string(p.Status.Effect), p.Spec.Disabled}
	},
}

func target(t *ichor.PatchTarget) string {
	switch {
	case t.Role != "":
		return "role=" + string(t.Role)
	case len(t.Machines) == 1:
		return "machine=" + t.Machines[0]
	case len(t.Machines) > 1:
		return fmt.Sprintf("%d machines", len(t.Machines))
	case t.Selector != nil:
		return "selector=" + metav1.FormatLabelSelector(t.Selector)
	}
	return "cluster"
}
