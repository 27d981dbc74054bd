package talossim

import (
	"context"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// An Image Factory bakes into every image it builds a virtual system
// extension named "schematic" whose version is the schematic's ID and whose
// author names the factory ("Image Factory (https://factory.example)");
// Talos lists it with the image's other extensions (ExtensionStatus), and
// from v1.14 its ImageFactorySchematicController also shows it as the
// ImageFactorySchematic resource. The simulator has no images, only their
// references: an installer of a factory is <registry>/installer/<ID>:<tag>
// (or installer-secureboot, or a platform's: metal-installer …), and the
// node that booted what it installed carries that schematic. An image of
// no factory carries none.

// factorySchematicFrom is the schematic ID and factory of the installer
// image ref, or "" for an image of no factory.
func factorySchematicFrom(ref string) (id, factory string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "", ""
	}
	parts := strings.Split(ref[:i], "/")
	if len(parts) != 3 {
		return "", ""
	}
	repo := strings.TrimSuffix(parts[1], "-secureboot")
	if repo != "installer" && !strings.HasSuffix(repo, "-installer") || parts[0] == "" || parts[2] == "" {
		return "", ""
	}
	return parts[2], "https://" + parts[0]
}

// imageFactorySchematicFrom is the first Talos release with the
// ImageFactorySchematic resource.
var imageFactorySchematicFrom = semver.MustParse("1.14.0")

// publishSchematic writes the schematic extension of the image the node
// booted, and from v1.14 its ImageFactorySchematic; it removes both when
// the image carries none.
func publishSchematic(ctx context.Context, st state.State, version, image string) error {
	ext := runtime.NewExtensionStatus(runtime.NamespaceName, "0")
	schematic := runtime.NewImageFactorySchematic(runtime.NamespaceName, runtime.ImageFactorySchematicID)
	id, factory := factorySchematicFrom(image)
	if id == "" {
		for _, md := range []*resource.Metadata{ext.Metadata(), schematic.Metadata()} {
			if err := removeResource(ctx, st, md); err != nil {
				return err
			}
		}
		return nil
	}
	ext.TypedSpec().Image = "schematic.sqsh"
	ext.TypedSpec().Metadata = extensions.Metadata{
		Name: constants.ImageFactorySchematicExtensionName, Version: id,
		Author: "Image Factory (" + factory + ")", Description: "Image Factory schematic",
	}
	if err := putResource(ctx, st, ext); err != nil {
		return err
	}
	if v, err := semver.ParseTolerant(version); err != nil || v.LT(imageFactorySchematicFrom) {
		return removeResource(ctx, st, schematic.Metadata())
	}
	schematic.TypedSpec().SchematicID = id
	schematic.TypedSpec().Flavor = "Image Factory"
	schematic.TypedSpec().APIURL = factory
	return putResource(ctx, st, schematic)
}
