package ichor

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group Ichor serves.
const GroupName = "ichor.dev"

// SchemeGroupVersion is the internal version of the group.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder registers the internal types in a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the internal types.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind qualifies a kind name with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
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
	return nil
}
