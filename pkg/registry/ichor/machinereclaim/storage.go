// Package machinereclaim stores MachineReclaims.
package machinereclaim

import (
	"context"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/ichor/action"
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

	Actions: []resource.Action[*ichor.MachineReclaim]{reclaim},

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

// ReclaimSubresource is the path element of the reclaim action.
const ReclaimSubresource = "reclaim"

// reclaim is POST machinereclaims/NAME/reclaim: it records who started a
// pending reclaim and when, for a requester holding the reclaim verb on
// machinereclaims. The body is a MachineReclaim whose content is ignored.
var reclaim = resource.Action[*ichor.MachineReclaim]{
	Name:    ReclaimSubresource,
	Verb:    ichor.VerbReclaim,
	NewBody: func() runtime.Object { return &ichor.MachineReclaim{} },
	Apply: func(ctx context.Context, r *ichor.MachineReclaim, _ runtime.Object) error {
		return action.Started(ctx, ichor.Resource("machinereclaims"), r.Name, r.Generation, &r.Status.ReclaimedBy, &r.Status.StartedAt, &r.Status.Conditions)
	},
	Event: func(_ context.Context, r *ichor.MachineReclaim, _ runtime.Object) resource.ActionEvent {
		return resource.ActionEvent{Reason: v1alpha1.EventStarted,
			Message: fmt.Sprintf("%s started reclaiming a machine into TalosCluster %s", r.Status.ReclaimedBy, r.Spec.ClusterName)}
	},
}
