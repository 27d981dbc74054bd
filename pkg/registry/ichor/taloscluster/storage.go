// Package taloscluster stores TalosClusters.
package taloscluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/ichor/override"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosClusters to the generic storage.
var Definition = &resource.Definition[*ichor.TalosCluster]{
	Resource:        ichor.Resource("talosclusters"),
	Singular:        "taloscluster",
	NamespaceScoped: true,
	ShortNames:      []string{"tc"},

	New:     func() *ichor.TalosCluster { return &ichor.TalosCluster{} },
	NewList: func() runtime.Object { return &ichor.TalosClusterList{} },

	// What the cluster trusts and runs, each with its own RBAC; the main
	// endpoint refuses changes to these fields.
	Subresources: resource.FieldSubresources[*ichor.TalosCluster]("talosclusters", v1alpha1.TalosCluster{}, validation.ValidateTalosClusterFieldUpdate),
	// The controller clears a bootstrap override once it used it.
	PrepareForStatusUpdate: func(_ context.Context, c, old *ichor.TalosCluster) {
		override.KeepGranted(&c.Status.Override, old.Status.Override)
	},
	StatusResetFields: []fieldpath.Path{fieldpath.MakePathOrDie("status", "override")},
	Actions: []resource.Action[*ichor.TalosCluster]{
		override.Action("TalosCluster", []ichor.SafetyCheck{ichor.CheckBootstrapWaitsForControlPlanes, ichor.CheckClusterHealth, ichor.CheckTalosDowngrade},
			func(c *ichor.TalosCluster) **ichor.OverrideStatus { return &c.Status.Override }),
	},

	Validate:             validation.ValidateTalosCluster,
	ValidateUpdate:       validation.ValidateTalosClusterUpdate,
	ValidateStatusUpdate: validation.ValidateTalosClusterStatusUpdate,

	SelectableFields: func(c *ichor.TalosCluster) fields.Set {
		return fields.Set{"status.phase": string(c.Status.Phase)}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Talos", Type: "string", Description: "Talos version the cluster runs (spec)."},
		{Name: "Kubernetes", Type: "string", Description: "Kubernetes version of the cluster (spec)."},
		{Name: "Endpoint", Type: "string", Description: "URL of the cluster's Kubernetes API."},
		{Name: "Machines", Type: "string", Description: "Ready machines out of all machines."},
		{Name: "Phase", Type: "string", Description: "Summary of the cluster's conditions."},
		{Name: "Disruption", Type: "string", Description: "The machine holding the disruption budget, and for what."},
		{Name: "CNI", Type: "string", Priority: 1, Description: "Network plugin."},
	},
	Cells: func(c *ichor.TalosCluster) []any {
		disruption := ""
		if d := c.Status.Disruption; d != nil {
			disruption = fmt.Sprintf("%s (%s)", d.Machine, d.Action)
		}
		return []any{
			c.Spec.TalosVersion, c.Spec.KubernetesVersion, c.Spec.ControlPlane.Endpoint,
			fmt.Sprintf("%d/%d", c.Status.Machines.Ready, c.Status.Machines.Total),
			string(c.Status.Phase), disruption, string(c.Spec.Network.CNI.Name),
		}
	},
}
