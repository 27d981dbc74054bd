// Package ichorinstallation stores the IchorInstallation singleton.
package ichorinstallation

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes IchorInstallations to the generic storage.
var Definition = &resource.Definition[*ichor.IchorInstallation]{
	Resource:   ichor.Resource("ichorinstallations"),
	Singular:   "ichorinstallation",
	ShortNames: []string{"ii"},

	New:     func() *ichor.IchorInstallation { return &ichor.IchorInstallation{} },
	NewList: func() runtime.Object { return &ichor.IchorInstallationList{} },

	// Upgrades and run-time settings, each with its own RBAC; the main
	// endpoint refuses changes to these fields.
	Subresources: resource.FieldSubresources[*ichor.IchorInstallation]("ichorinstallations", v1alpha1.IchorInstallation{}, validation.ValidateIchorInstallationFieldUpdate),

	Validate:             validation.ValidateIchorInstallation,
	ValidateUpdate:       validation.ValidateIchorInstallationUpdate,
	ValidateStatusUpdate: validation.ValidateIchorInstallationStatusUpdate,

	Columns: []metav1.TableColumnDefinition{
		{Name: "Version", Type: "string", Description: "Installed Ichor version."},
		{Name: "Provisioning Networks", Type: "string", Description: "Networks scanned for machines in maintenance mode."},
		{Name: "Scan Interval", Type: "string", Priority: 1, Description: "Time between scans."},
	},
	Cells: func(in *ichor.IchorInstallation) []any {
		interval := ""
		if d := in.Spec.Settings.ScanInterval; d != nil {
			interval = d.Duration.String()
		}
		return []any{in.Spec.Version, strings.Join(in.Spec.Settings.ProvisioningNetworks, ","), interval}
	},
}
