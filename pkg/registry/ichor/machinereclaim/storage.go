// Package machinereclaim stores MachineReclaims.
package machinereclaim

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes MachineReclaims to the generic storage.
var Definition = &resource.Definition[*ichor.MachineReclaim]{
	Resource:        ichor.Resource("machinereclaims"),
	Singular:        "machinereclaim",
	NamespaceScoped: true,
	ShortNames:      []string{"mr"},

	New:     func() *ichor.MachineReclaim { return &ichor.MachineReclaim{} },
	NewList: func() runtime.Object { return &ichor.MachineReclaimList{} },

	// A reclaim waits for the reclaim subresource.
	PrepareForCreate: func(_ context.Context, r *ichor.MachineReclaim) {
		r.Status.Phase = ichor.ReclaimPending
	},

	Validate:             validation.ValidateMachineReclaim,
	ValidateUpdate:       validation.ValidateMachineReclaimUpdate,
	ValidateStatusUpdate: validation.ValidateMachineReclaimStatusUpdate,

	SelectableFields: func(r *ichor.MachineReclaim) fields.Set {
		return fields.Set{"spec.clusterName": r.Spec.ClusterName, "status.phase": string(r.Status.Phase)}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Machine", Type: "string", Description: "The machine to reclaim: namespace/name, or the address of an unmanaged node."},
		{Name: "Cluster", Type: "string", Description: "TalosCluster the machine joins."},
		{Name: "Role", Type: "string", Description: "Role the machine takes."},
		{Name: "Phase", Type: "string", Description: "Where the reclaim is."},
	},
	Cells: func(r *ichor.MachineReclaim) []any {
		machine := ""
		switch {
		case r.Spec.MachineRef != nil:
			machine = r.Spec.MachineRef.Namespace + "/" + r.Spec.MachineRef.Name
		case r.Spec.Unmanaged != nil:
			machine = r.Spec.Unmanaged.Address
		}
		return []any{machine, r.Spec.ClusterName, string(r.Spec.Role), string(r.Status.Phase)}
	},
}
