package ichor

// Schematic is an Image Factory schematic: what a machine's Talos image
// carries besides Talos itself.
type Schematic struct {
	// systemExtensions are official system extensions by name.
	SystemExtensions []string
	// extraKernelArgs are kernel arguments the image boots with.
	ExtraKernelArgs []string
	// overlay is the board overlay of single-board computers.
	Overlay *SchematicOverlay
}

// SchematicOverlay is a board overlay of a schematic.
type SchematicOverlay struct {
	// name of the overlay.
	Name string
	// image is the overlay's image repository.
	Image string
	// options are the overlay's options, as a YAML mapping.
	Options string
}

// ImageFactory is the Talos Image Factory an installation's machines boot
// and install from.
type ImageFactory struct {
	// url is the factory's https address.
	URL string
	// registry is where its installer images are pulled from.
	Registry string
}

// ImageStatus says where a cluster's Talos image comes from.
type ImageStatus struct {
	// schematicID is the ID of the cluster's schematic.
	SchematicID string
	// installer is the installer image of the schematic at the cluster's version.
	Installer string
	// factoryURL is the image factory's address.
	FactoryURL string
}
