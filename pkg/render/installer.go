package render

import (
	"errors"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/imageref"
	"ichor.dev/ichor/pkg/schematic"
)

// Installer is the installer image a machine installs and upgrades with.
type Installer struct {
	// Image is the reference, tagged with the version the cluster runs
	// (ClusterVersion); "" leaves machinery's default.
	Image string
	// SchematicID is the Image Factory schematic the image is built from,
	// when it comes from a factory.
	SchematicID string
}

// InstallerFor chooses the installer of machine m of cluster c (m nil: the
// cluster's own, for a machine without a schematic of its own):
//
//  1. the cluster's SecureBoot installer, spec.security.secureBoot.installerImage;
//  2. with an image factory, the factory's installer of the machine's
//     schematic (its own, else the cluster's, else the empty one), the
//     SecureBoot one for a node that reports it booted under SecureBoot;
//  3. installImage, ichor-controller's --install-image, for mirrors without
//     a factory.
//
// A schematic without a factory is an InputError: nothing else builds it.
func InstallerFor(c *v1alpha1.TalosCluster, m *v1alpha1.TalosMachine, factory *v1alpha1.ImageFactory, installImage string) (Installer, error) {
	version := ClusterVersion(c)
	if image := c.Spec.Security.SecureBoot.InstallerImage; image != "" {
		return Installer{Image: imageref.WithTag(image, version)}, nil
	}
	named, field := c.Spec.Schematic, "TalosCluster.spec.schematic"
	if m != nil && m.Spec.Schematic != nil {
		named, field = m.Spec.Schematic, "TalosMachine.spec.schematic"
	}
	if factory == nil {
		if named != nil {
			return Installer{}, &InputError{Field: field, Err: errors.New(
				"a schematic is built by an Image Factory, and the installation names none: an admin sets spec.settings.imageFactory of the IchorInstallation")}
		}
		if installImage == "" {
			return Installer{}, nil
		}
		return Installer{Image: imageref.WithTag(installImage, version)}, nil
	}
	s, err := schematic.Of(named)
	if err != nil {
		return Installer{}, &InputError{Field: field, Err: err}
	}
	id, err := s.ID()
	if err != nil {
		return Installer{}, &InputError{Field: field, Err: fmt.Errorf("schematic ID: %w", err)}
	}
	secureBoot := m != nil && m.Status.Security != nil && m.Status.Security.SecureBoot
	return Installer{Image: schematic.FactoryOf(factory).Installer(id, version, secureBoot), SchematicID: id}, nil
}
