// Package talosoperation stores TalosOperations.
package talosoperation

import (
	"context"
	"fmt"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/ichor/action"
	"ichor.dev/ichor/pkg/registry/resource"
)

// StartSubresource is the path element of the start action.
const StartSubresource = "start"

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

	Actions: []resource.Action[*ichor.TalosOperation]{start},
	// The controller holds a running operation until its step in flight ended.
	Subresources: []resource.Subresource[*ichor.TalosOperation]{resource.Finalizers[*ichor.TalosOperation]()},

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
		{Name: "Progress", Type: "string", Description: "Steps succeeded of all steps."},
		{Name: "Machine", Type: "string", Description: "The machine whose step runs now (and, upgrading Kubernetes, the component)."},
		{Name: "Started By", Type: "string", Description: "User who started the operation."},
		{Name: "Machines", Type: "string", Priority: 1, Description: "Machines named by the operation."},
	},
	Cells: func(o *ichor.TalosOperation) []any {
		machines := "<all>"
		if len(o.Spec.Machines) > 0 {
			machines = strings.Join(o.Spec.Machines, ",")
		}
		progress, inFlight := "", ""
		if n := len(o.Status.Steps); n > 0 {
			done := 0
			for _, step := range o.Status.Steps {
				switch step.Phase {
				case ichor.OperationSucceeded:
					done++
				case ichor.OperationRunning:
					inFlight = step.Machine
					if step.Component != "" {
						inFlight += " " + string(step.Component)
					}
					if step.Action != "" {
						inFlight += " " + string(step.Action)
					}
				}
			}
			progress = fmt.Sprintf("%d/%d", done, n)
		}
		return []any{o.Spec.ClusterName, string(o.Spec.Type), string(o.Status.Phase), progress, inFlight, o.Status.StartedBy, machines}
	},
}

// start is POST talosoperations/NAME/start: it records who started a pending
// operation and when, once the requester holds the start verb on
// talosoperations/<type> of the stored operation it changes. The operation stays Pending until the controller
// takes it up. The body is a TalosOperation whose content is ignored.
var start = resource.Action[*ichor.TalosOperation]{
	Name:    StartSubresource,
	NewBody: func() runtime.Object { return &ichor.TalosOperation{} },
	Verb:    ichor.VerbStart,
	VerbOn:  func(o *ichor.TalosOperation) string { return string(o.Spec.Type) },
	Apply: func(ctx context.Context, o *ichor.TalosOperation, _ runtime.Object) error {
		return action.Started(ctx, ichor.Resource("talosoperations"), o.Name, o.Generation, &o.Status.StartedBy, &o.Status.StartedAt, &o.Status.Conditions)
	},
	Event: func(_ context.Context, o *ichor.TalosOperation, _ runtime.Object) resource.ActionEvent {
		return resource.ActionEvent{Reason: v1alpha1.EventStarted,
			Message: fmt.Sprintf("%s started the %s operation on TalosCluster %s", o.Status.StartedBy, o.Spec.Type, o.Spec.ClusterName)}
	},
}
