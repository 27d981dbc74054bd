package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group Ichor serves.
const GroupName = "ichor.dev"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that register this version in a scheme.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers this version's types, defaults and conversions.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Generated functions register themselves from their own files, so this
	// package compiles before code generation has run.
	localSchemeBuilder.Register(addKnownTypes, addDefaultingFuncs)
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&TalosCluster{}, &TalosClusterList{},
		&TalosMachine{}, &TalosMachineList{},
		&TalosConfigPatch{}, &TalosConfigPatchList{},
		&TalosOperation{}, &TalosOperationList{},
		&TalosCredentialRequest{}, &TalosCredentialRequestList{},
		&MachineReclaim{}, &MachineReclaimList{},
		&IchorUser{}, &IchorUserList{},
		&IchorInstallation{}, &IchorInstallationList{},
		&TalosBackup{}, &TalosBackupList{},
		&Override{},
		&IchorUserPassword{},
		&IchorUserLogin{},
		&DownloadOptions{},
		&PacketCaptureOptions{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
