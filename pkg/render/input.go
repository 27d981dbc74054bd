package render

import (
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Input is everything a machine's config is made from. The API objects are
// taken as they are stored so that rendering and its tests see exactly what
// the controller sees.
type Input struct {
	// Cluster supplies the versions, endpoint, networks, CNI and security options.
	Cluster *ichorv1alpha1.TalosCluster
	// Machine supplies the role, hostname, install disk, and the name and labels
	// that machine-targeted patches match.
	Machine *ichorv1alpha1.TalosMachine
	// Patches are candidate patches, typically every TalosConfigPatch in the
	// cluster's namespace; Render keeps those that target Machine.
	Patches []ichorv1alpha1.TalosConfigPatch
	// Secrets is the cluster's secrets bundle as it is in force: during a
	// CA rotation, its Talos API CA and its Kubernetes CA are those that
	// issue in the rotation's phase (machine.ca, cluster.ca).
	Secrets *secrets.Bundle
	// TalosAcceptedCAs are the PEM certificates of the Talos API CAs the
	// node accepts besides (machine.acceptedCAs): a rotation's other CA.
	TalosAcceptedCAs [][]byte
	// KubernetesAcceptedCAs are those of the Kubernetes CAs accepted
	// besides cluster.ca (cluster.acceptedCAs), likewise.
	KubernetesAcceptedCAs [][]byte
	// InstallImage is the installer image written to machine.install.image
	// (for example siderolabs/installer:v1.13.0 behind the mirror the site
	// uses), at the tag of the Talos version the cluster runs (ClusterVersion):
	// an upgrade moves it, so a machine that joins later installs the version
	// the others run. Empty leaves machinery's default, which is empty.
	InstallImage string
	// ServiceAccountAcceptedKeys are the PEM public keys of service-account
	// signing keys a control plane's kube-apiserver accepts besides the
	// bundle's (KubeServiceAccountConfig's accepted keys): a key rotation's
	// other key. The v1.14 contract on.
	ServiceAccountAcceptedKeys [][]byte
	// EncryptionKeys, when set, are the secretbox keys a control plane's
	// kube-apiserver encrypts Secrets at rest with, in order: the first
	// encrypts, each decrypts (KubeEtcdEncryptionConfig). Nil: the bundle's
	// secret alone, as Talos names it. The v1.14 contract on.
	EncryptionKeys []EncryptionKey
	// ImageFactory is the installation's Image Factory
	// (spec.settings.imageFactory), which builds the installer of the
	// machine's schematic; nil for none. See InstallerFor.
	ImageFactory *ichorv1alpha1.ImageFactory
}

// Rendered is a machine's complete, validated config.
type Rendered struct {
	// Config is the multi-document machine config, encoded without comments.
	Config []byte
	// Hash is the lowercase hex SHA-256 of Config.
	Hash string
	// Applied lists the patches that were applied, in the order they were applied.
	Applied []AppliedPatch
	// Warnings are machinery's validation warnings; they do not stop rendering.
	Warnings []string
	// Contract is the version contract the config is rendered for (v1.14),
	// which decides its layout.
	Contract string
}

// AppliedPatch records one patch that went into a rendered config, with the
// generation applied, so a patch's status can say which version is in effect.
type AppliedPatch struct {
	// Patch is the namespace and name of the TalosConfigPatch.
	Patch types.NamespacedName
	// Generation is the patch's metadata.generation at rendering.
	Generation int64
	// Scope is the group the patch was ordered in.
	Scope Scope
}
