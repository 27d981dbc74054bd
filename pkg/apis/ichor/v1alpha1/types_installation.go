package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// InstallationName is the only name an IchorInstallation may have.
const InstallationName = "ichor"

// +genclient
// +genclient:nonNamespaced
// +genclient:method=UpdateVersion,verb=update,subresource=version
// +genclient:method=UpdateSettings,verb=update,subresource=settings
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorInstallation is the installation's singleton, named "ichor": the
// installed version and the runtime settings of every component.
type IchorInstallation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   IchorInstallationSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status IchorInstallationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// IchorInstallationSpec is the desired version and settings.
type IchorInstallationSpec struct {
	// version of Ichor installed, as a semantic version with a leading v.
	// +optional
	Version string `json:"version,omitempty" protobuf:"bytes,1,opt,name=version"`
	// settings read by Ichor's components at run time.
	// +optional
	Settings InstallationSettings `json:"settings,omitempty" protobuf:"bytes,2,opt,name=settings"`
}

// InstallationSettings are Ichor's run-time settings.
type InstallationSettings struct {
	// provisioningNetworks are CIDRs scanned for machines in maintenance mode.
	// +optional
	// +listType=atomic
	ProvisioningNetworks []string `json:"provisioningNetworks,omitempty" protobuf:"bytes,1,rep,name=provisioningNetworks"`
	// scanInterval between scans of the provisioning networks; at least 30s, defaults to 5m.
	// +optional
	ScanInterval *metav1.Duration `json:"scanInterval,omitempty" protobuf:"bytes,2,opt,name=scanInterval"`
	// credentialLifetimes bound the credentials Ichor issues.
	// +optional
	CredentialLifetimes CredentialLifetimes `json:"credentialLifetimes,omitempty" protobuf:"bytes,3,opt,name=credentialLifetimes"`
	// usersEnabled turns on sign-in with IchorUser passwords.
	// +optional
	UsersEnabled bool `json:"usersEnabled,omitempty" protobuf:"varint,4,opt,name=usersEnabled"`
	// managementAudiences are the audiences the management cluster's
	// kube-apiserver accepts in people's tokens (the audiences of its
	// authentication configuration's JWT issuers), besides Ichor's own
	// issuer's, "ichor", which always counts. A token for one of them signs
	// in to the management plane, so no managed cluster may trust one: a
	// TalosCluster's spec.authentication.clientID is refused when it is
	// among them, since whoever controls that cluster's kube-apiserver sees
	// the tokens its users send it.
	// +optional
	// +listType=set
	ManagementAudiences []string `json:"managementAudiences,omitempty" protobuf:"bytes,5,rep,name=managementAudiences"`
	// namespaceProvisioningNetworks give namespaces networks of their own,
	// for installations whose namespaces are tenants: a namespace listed
	// here places machines only in its own networks (without the override
	// verb), and provisioningNetworks no longer count for it.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	NamespaceProvisioningNetworks []NamespaceProvisioningNetworks `json:"namespaceProvisioningNetworks,omitempty" protobuf:"bytes,6,rep,name=namespaceProvisioningNetworks"`
	// ambientCredentialBuckets are the buckets a TalosBackup may write to
	// with ichor-controller's own cloud identity (a target without
	// credentialsRef): s3:<bucket>, gcs:<bucket> or
	// azure:<storageAccount>/<container>. A target without credentialsRef
	// elsewhere is refused, so that no namespace's admin can send backups,
	// or read them back, wherever the controller's identity reaches.
	// +optional
	// +listType=set
	AmbientCredentialBuckets []string `json:"ambientCredentialBuckets,omitempty" protobuf:"bytes,7,rep,name=ambientCredentialBuckets"`
	// imageFactory is the Talos Image Factory machines install from (a
	// self-hosted one, or a mirror, on air-gapped sites): every cluster's
	// installer is <registry>/installer/<schematic ID>:<version> (or
	// installer-secureboot). Without one, ichor-controller's --install-image
	// is the installer, and a cluster that names a schematic does not render.
	// +optional
	ImageFactory *ImageFactory `json:"imageFactory,omitempty" protobuf:"bytes,8,opt,name=imageFactory"`
}

// NamespaceProvisioningNetworks are the provisioning networks of one namespace.
type NamespaceProvisioningNetworks struct {
	// namespace the networks are for.
	Namespace string `json:"namespace" protobuf:"bytes,1,opt,name=namespace"`
	// networks are CIDRs.
	// +listType=atomic
	Networks []string `json:"networks" protobuf:"bytes,2,rep,name=networks"`
}

// CredentialLifetimes bound the credentials Ichor issues.
type CredentialLifetimes struct {
	// talosCredential is the lifetime of TalosCredentialRequest certificates; at most and by default 10m.
	// +optional
	TalosCredential *metav1.Duration `json:"talosCredential,omitempty" protobuf:"bytes,1,opt,name=talosCredential"`
	// readerTalosconfig is the lifetime of downloaded os:reader talosconfigs; at most and by default 1h.
	// +optional
	ReaderTalosconfig *metav1.Duration `json:"readerTalosconfig,omitempty" protobuf:"bytes,2,opt,name=readerTalosconfig"`
}

// IchorInstallationStatus reports what runs.
type IchorInstallationStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// components and the versions they run.
	// +optional
	// +listType=map
	// +listMapKey=name
	Components []ComponentVersion `json:"components,omitempty" protobuf:"bytes,2,rep,name=components"`
	// conditions of the installation.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
}

// ComponentVersion is one running component and its version.
type ComponentVersion struct {
	// name of the component (ichor-apiserver, ichor-controller).
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// version it runs.
	Version string `json:"version" protobuf:"bytes,2,opt,name=version"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorInstallationList is a list of IchorInstallation objects.
type IchorInstallationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []IchorInstallation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
