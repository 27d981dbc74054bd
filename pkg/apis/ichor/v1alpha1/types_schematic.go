package v1alpha1

// Schematic is an Image Factory schematic: what a machine's Talos image
// carries besides Talos itself. The factory identifies it by a content
// hash (its ID), which names the installer image
// (<registry>/installer/<ID>:<version>) and the boot media.
type Schematic struct {
	// systemExtensions are official system extensions by name
	// (siderolabs/iscsi-tools), in the order the ID hashes them.
	// +optional
	// +listType=atomic
	SystemExtensions []string `json:"systemExtensions,omitempty" protobuf:"bytes,1,rep,name=systemExtensions"`
	// extraKernelArgs are kernel arguments the image boots with, besides Talos's own.
	// +optional
	// +listType=atomic
	ExtraKernelArgs []string `json:"extraKernelArgs,omitempty" protobuf:"bytes,2,rep,name=extraKernelArgs"`
	// overlay is the board overlay of single-board computers.
	// +optional
	Overlay *SchematicOverlay `json:"overlay,omitempty" protobuf:"bytes,3,opt,name=overlay"`
}

// SchematicOverlay is a board overlay of a schematic.
type SchematicOverlay struct {
	// name of the overlay (rpi_generic).
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// image is the overlay's image repository (siderolabs/sbc-raspberrypi).
	Image string `json:"image" protobuf:"bytes,2,opt,name=image"`
	// options are the overlay's options, as a YAML mapping.
	// +optional
	Options string `json:"options,omitempty" protobuf:"bytes,3,opt,name=options"`
}

// ImageFactory is the Talos Image Factory an installation's machines boot
// and install from: an https service that builds installer images and boot
// media for a schematic, and a registry that serves the installer images.
type ImageFactory struct {
	// url is the factory's https address; ISO, disk-image and PXE URLs are under it.
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// registry is where its installer images are pulled from, as host[:port];
	// defaults to url's host.
	// +optional
	Registry string `json:"registry,omitempty" protobuf:"bytes,2,opt,name=registry"`
}

// ImageStatus says where a cluster's Talos image comes from.
type ImageStatus struct {
	// schematicID is the ID of the cluster's schematic (the empty schematic's
	// when the cluster names none).
	SchematicID string `json:"schematicID" protobuf:"bytes,1,opt,name=schematicID"`
	// installer is the installer image of the schematic at the version the
	// cluster runs: what a talos-upgrade pulls.
	Installer string `json:"installer" protobuf:"bytes,2,opt,name=installer"`
	// factoryURL is the image factory's address, under which the boot media of
	// the schematic are (ichor image-urls lists them).
	FactoryURL string `json:"factoryURL" protobuf:"bytes,3,opt,name=factoryURL"`
}
