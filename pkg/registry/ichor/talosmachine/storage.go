// Package talosmachine stores TalosMachines.
package talosmachine

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
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
