package ichor

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstallationName is the only name an IchorInstallation may have.
const InstallationName = "ichor"

// Bounds of the installation settings, shared by defaulting and validation.
const (
	// MinScanInterval keeps provisioning-network scans from running back to back.
	MinScanInterval = 30 * time.Second
	// MaxTalosCredentialLifetime caps TalosCredentialRequest certificates.
	MaxTalosCredentialLifetime = 10 * time.Minute
	// MaxReaderTalosconfigLifetime caps downloaded os:reader talosconfigs.
	MaxReaderTalosconfigLifetime = time.Hour
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorInstallation is the installation's singleton, named "ichor": the
// installed version and the runtime settings of every component.
type IchorInstallation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   IchorInstallationSpec
	Status IchorInstallationStatus
}

// IchorInstallationSpec is the desired version and settings.
type IchorInstallationSpec struct {
	// version of Ichor installed, as a semantic version with a leading v.
	Version string
	// settings read by Ichor's components at run time.
	Settings InstallationSettings
}

// InstallationSettings are Ichor's run-time settings.
type InstallationSettings struct {
	// provisioningNetworks are CIDRs scanned for machines in maintenance mode.
	ProvisioningNetworks []string
	// scanInterval between scans of the provisioning networks; at least 30s, defaults to 5m.
	ScanInterval *metav1.Duration
	// credentialLifetimes bound the credentials Ichor issues.
	CredentialLifetimes CredentialLifetimes
	// usersEnabled turns on sign-in with IchorUser passwords.
	UsersEnabled bool
	// managementAudiences are the audiences the management cluster's
	// kube-apiserver accepts in people's tokens; no managed cluster may trust one.
	ManagementAudiences []string
	// namespaceProvisioningNetworks give namespaces networks of their own.
	NamespaceProvisioningNetworks []NamespaceProvisioningNetworks
	// ambientCredentialBuckets are the buckets a backup may reach with the
	// controller's own cloud identity.
	AmbientCredentialBuckets []string
	// imageFactory is the Talos Image Factory machines install from.
	ImageFactory *ImageFactory
}

// NamespaceProvisioningNetworks are the provisioning networks of one namespace.
type NamespaceProvisioningNetworks struct {
	Namespace string
	Networks  []string
}

// CredentialLifetimes bound the credentials Ichor issues.
type CredentialLifetimes struct {
	// talosCredential is the lifetime of TalosCredentialRequest certificates; at most and by default 10m.
	TalosCredential *metav1.Duration
	// readerTalosconfig is the lifetime of downloaded os:reader talosconfigs; at most and by default 1h.
	ReaderTalosconfig *metav1.Duration
}

// IchorInstallationStatus reports what runs.
type IchorInstallationStatus struct {
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// components and the versions they run.
	Components []ComponentVersion
	// conditions of the installation.
	Conditions []metav1.Condition
}

// ComponentVersion is one running component and its version.
type ComponentVersion struct {
	// name of the component (ichor-apiserver, ichor-controller).
	Name string
	// version it runs.
	Version string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorInstallationList is a list of IchorInstallation objects.
type IchorInstallationList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []IchorInstallation
}

// DefaultTokenAudience is the audience of ichor-auth's tokens and the ichor
// CLI's client at an OpenID provider, unless configured otherwise: the
// management plane accepts it, so no managed cluster may trust it.
const DefaultTokenAudience = "ichor"
