package taloscluster

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/installation"
	"ichor.dev/ichor/pkg/render"
)

// resolveImage records where the cluster's installer comes from
// (status.image, ImageReady): the installation's image factory for the
// cluster's schematic, the SecureBoot installer an admin named, or
// ichor-controller's --install-image. Machines render the same choice
// (render.InstallerFor); a machine with a schematic of its own has its own
// installer.
func (r *Reconciler) resolveImage(ctx context.Context, v *view) error {
	c := v.cluster
	settings, err := installation.Settings(ctx, r.Client)
	if err != nil {
		return err
	}
	installer, err := render.InstallerFor(c, nil, settings.ImageFactory, r.Options.InstallImage)
	switch {
	case err != nil:
		c.Status.Image = nil
		v.set(v1alpha1.ClusterConditionImageReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNoImageFactory, "%v", err)
	case installer.SchematicID != "":
		c.Status.Image = &v1alpha1.ImageStatus{SchematicID: installer.SchematicID, Installer: installer.Image, FactoryURL: settings.ImageFactory.URL}
		v.set(v1alpha1.ClusterConditionImageReady, metav1.ConditionTrue, v1alpha1.ClusterReasonFromFactory,
			"machines install %s, built by the image factory for schematic %s", installer.Image, installer.SchematicID)
	default:
		c.Status.Image = nil
		msg := "the installation has no image factory and ichor-controller no --install-image: machines install Talos's default installer, which Talos v1.14 no longer publishes"
		if installer.Image != "" {
			msg = fmt.Sprintf("machines install %s (no image factory: ichor-controller's --install-image, or the cluster's SecureBoot installer)", installer.Image)
		}
		v.set(v1alpha1.ClusterConditionImageReady, metav1.ConditionTrue, v1alpha1.ClusterReasonFromInstallImage, "%s", msg)
	}
	return nil
}

// contractCurrent says whether every machine runs a config of the
// cluster's version contract: ConfigContract, False while a move of
// spec.talosVersion to another minor release rolls out.
func contractCurrent(v *view) {
	c := v.cluster
	want, err := render.ContractOf(c.Spec.TalosVersion)
	if err != nil {
		return // validation refuses such a version; MachinesReady says what renders
	}
	var moved, other []string
	for _, m := range v.machines {
		if a := m.Status.AppliedConfig; a != nil && a.Contract == want {
			moved = append(moved, m.Name)
		} else if a != nil {
			other = append(other, m.Name)
		}
	}
	if len(other) == 0 {
		v.set(v1alpha1.ClusterConditionConfigContract, metav1.ConditionTrue, v1alpha1.ClusterReasonContractCurrent,
			"every machine runs a config of the %s contract", want)
		return
	}
	v.set(v1alpha1.ClusterConditionConfigContract, metav1.ConditionFalse, v1alpha1.ClusterReasonContractMoving,
		"moving the machines' configs to the %s contract: %d of %d moved; still on another: %s. "+
			"Nodes of Talos v1.14 and later take the new layout live and reboot, one at a time, only for what their boot reads",
		want, len(moved), len(moved)+len(other), strings.Join(other, ", "))
}
