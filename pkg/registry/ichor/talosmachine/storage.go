// Package talosmachine stores TalosMachines.
package talosmachine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/ichor/override"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosMachines to the generic storage.
var Definition = &resource.Definition[*ichor.TalosMachine]{
	Resource:        ichor.Resource("talosmachines"),
	Singular:        "talosmachine",
	NamespaceScoped: true,
	ShortNames:      []string{"tm"},

	New:     func() *ichor.TalosMachine { return &ichor.TalosMachine{} },
	NewList: func() runtime.Object { return &ichor.TalosMachineList{} },

	// What was read and pinned at one address says nothing about another:
	// a new address or expected certificate (allowed only before a
	// decision) is contacted afresh.
	PrepareForUpdate: func(_ context.Context, m, old *ichor.TalosMachine) {
		if m.Spec.Address != old.Spec.Address || m.Spec.ExpectedFingerprint != old.Spec.ExpectedFingerprint {
			m.Status.Maintenance, m.Status.Hardware, m.Status.TalosVersion = nil, nil, ""
			m.Status.Phase = ""
		}
	},
	// The decision is written only through /approval, and an override only
	// through /override, so /status keeps them (it may clear a used override).
	PrepareForStatusUpdate: func(_ context.Context, m, old *ichor.TalosMachine) {
		m.Status.Approval = old.Status.Approval
		override.KeepGranted(&m.Status.Override, old.Status.Override)
	},
	StatusResetFields: []fieldpath.Path{fieldpath.MakePathOrDie("status", "approval"), fieldpath.MakePathOrDie("status", "override")},
	// The controller adds and removes its finalizer through /finalizers,
	// which writes nothing else.
	Subresources: append([]resource.Subresource[*ichor.TalosMachine]{approval, resource.Finalizers[*ichor.TalosMachine]()},
		resource.FieldSubresources[*ichor.TalosMachine]("talosmachines", v1alpha1.TalosMachine{}, validation.ValidateTalosMachineFieldUpdate)...),
	Actions: []resource.Action[*ichor.TalosMachine]{
		override.Action("TalosMachine", []ichor.SafetyCheck{ichor.CheckControlPlaneQuorum},
			func(m *ichor.TalosMachine) **ichor.OverrideStatus { return &m.Status.Override }),
	},

	Validate:             validation.ValidateTalosMachine,
	ValidateUpdate:       validation.ValidateTalosMachineUpdate,
	ValidateStatusUpdate: validation.ValidateTalosMachineStatusUpdate,

	SelectableFields: func(m *ichor.TalosMachine) fields.Set {
		return fields.Set{
			"spec.clusterName": m.Spec.ClusterName,
			"spec.role":        string(m.Spec.Role),
			"status.phase":     string(m.Status.Phase),
		}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster the machine belongs to."},
		{Name: "Role", Type: "string", Description: "controlplane or worker."},
		{Name: "Phase", Type: "string", Description: "Where the machine is in its life."},
		{Name: "Address", Type: "string", Description: "host:port of the node's Talos API."},
		{Name: "Talos", Type: "string", Description: "Talos version the node runs."},
		{Name: "Node", Type: "string", Priority: 1, Description: "Name of the node in its Kubernetes cluster."},
		{Name: "Fingerprint", Type: "string", Priority: 1, Description: "Start of the pinned maintenance certificate's SPKI SHA-256."},
	},
	Cells: func(m *ichor.TalosMachine) []any {
		fingerprint := ""
		if mt := m.Status.Maintenance; mt != nil && len(mt.CertificateFingerprint) >= 16 {
			fingerprint = mt.CertificateFingerprint[:16]
		}
		return []any{
			m.Spec.ClusterName, string(m.Spec.Role), string(m.Status.Phase), m.Spec.Address,
			m.Status.TalosVersion, m.Status.NodeName, fingerprint,
		}
	},
}

// ApprovalSubresource is the path element of the approval endpoint, whose
// writes need the approve verb (pkg/admission/plugin/customverbs).
const ApprovalSubresource = "approval"

// approval is talosmachines/NAME/approval: it writes status.approval only,
// recording who decided and when from the request, never from the body.
var approval = resource.Subresource[*ichor.TalosMachine]{
	Name: ApprovalSubresource,
	PrepareForUpdate: func(ctx context.Context, m, old *ichor.TalosMachine) {
		decision := m.Status.Approval
		m.Spec = old.Spec
		m.Status = old.Status
		switch {
		case decision == nil:
			m.Status.Approval = nil // refused by validation
		case old.Status.Approval != nil && old.Status.Approval.Decision == decision.Decision:
			// Repeating the decision changes nothing; the first one stays on record.
		default:
			by := ""
			if user, ok := genericapirequest.UserFrom(ctx); ok {
				by = user.GetName()
			}
			m.Status.Approval = &ichor.ApprovalStatus{Decision: decision.Decision, Reason: decision.Reason, By: by, At: metav1.Now()}
		}
	},
	ValidateUpdate: validation.ValidateTalosMachineApproval,
	ResetFields:    resource.ResetAllBut(v1alpha1.TalosMachine{}, "status", "approval"),
}
