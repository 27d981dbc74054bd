// Package talosoperation stores TalosOperations.
package talosoperation

import (
	"strings"

	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosOperations to the generic storage.
var Definition = &resource.Definition[*ichor.TalosOperation]{
	Resource:        ichor.Resource("talosoperations"),
	Singular:        "talosoperation",
	NamespaceScoped: true,
	ShortNames:      []string{"top"},

	New:     func() *ichor.TalosOperation { return &ichor.TalosOperation{} },
	NewList: func() runtime.Object { return &ichor.TalosOperationList{} },

	// Every operation starts Pending; only the start subresource moves it on.
	PrepareForCreate: func(_ context.Context, o *ichor.TalosOperation) {
		o.Status.Phase = ichor.OperationPending
	},

	Validate:             validation.ValidateTalosOperation,
	ValidateUpdate:       validation.ValidateTalosOperationUpdate,
	ValidateStatusUpdate: validation.ValidateTalosOperationStatusUpdate,

	SelectableFields: func(o *ichor.TalosOperation) fields.Set {
		return fields.Set{
			"spec.clusterName": o.Spec.ClusterName,
			"spec.type":        string(o.Spec.Type),
			"status.phase":     string(o.Status.Phase),
		}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster the operation acts on."},
		{Name: "Type", Type: "string", Description: "What the operation does."},
		{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded or Failed."},
		{Name: "Started By", Type: "string", Description: "User who started the operation."},
		{Name: "Machines", Type: "string", Priority: 1, Description: "Machines named by the operation."},
	},
	Cells: func(o *ichor.TalosOperation) []any {
		machines := "<all>"
		if len(o.Spec.Machines) > 0 {
			machines = strings.Join(o.Spec.Machines, ",")
		}
		return []any{o.Spec.ClusterName, string(o.Spec.Type), string(o.Status.Phase), o.Status.StartedBy, machines}
	},
}
