package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:method=Reclaim,verb=create,subresource=reclaim
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaim asks to reset a machine that belongs elsewhere (another
// Ichor cluster, or a Talos cluster Ichor does not manage) and bring it into
// a cluster in this namespace. Nothing happens until the reclaim subresource
// is posted.
type MachineReclaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   MachineReclaimSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status MachineReclaimStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// MachineReclaimSpec names the machine, where it goes, and how it is wiped.
// Exactly one of machineRef and unmanaged is set. The node joins through a
// new TalosMachine in this namespace named after the reclaim.
type MachineReclaimSpec struct {
	// machineRef is a TalosMachine Ichor manages in another cluster. It is
	// reset as deleting it resets it: gracefully (a control plane leaves etcd
	// first, the node is drained), wiping Talos's STATE and EPHEMERAL
	// partitions, under its cluster's disruption budget, and refused when it
	// would cost that cluster etcd's quorum unless an admin overrode the
	// ControlPlaneQuorum check on it. Creating the reclaim needs the delete
	// verb on it.
	// +optional
	MachineRef *MachineReference `json:"machineRef,omitempty" protobuf:"bytes,1,opt,name=machineRef"`
	// unmanaged is a Talos node Ichor does not manage.
	// +optional
	Unmanaged *UnmanagedMachine `json:"unmanaged,omitempty" protobuf:"bytes,2,opt,name=unmanaged"`
	// clusterName is the TalosCluster in this namespace the machine joins.
	ClusterName string `json:"clusterName" protobuf:"bytes,3,opt,name=clusterName"`
	// role the machine takes in the new cluster; defaults to worker.
	// +optional
	Role MachineRole `json:"role,omitempty" protobuf:"bytes,4,opt,name=role,casttype=MachineRole"`
	// wipe is what the reset of an unmanaged node wipes, as Talos's wipe
	// modes say: all or system-disk, both the whole system disk (the node
	// then boots Talos in maintenance mode from another medium, such as PXE
	// or an ISO); defaults to all. user-disks keeps Talos's state, so the
	// node would not leave its cluster, and is refused. Not set for
	// machineRef.
	// +optional
	Wipe WipeMode `json:"wipe,omitempty" protobuf:"bytes,5,opt,name=wipe,casttype=WipeMode"`
	// graceful has an unmanaged node leave its cluster's etcd and drain
	// itself before it is wiped; defaults to true. Not set for machineRef.
	// +optional
	Graceful *bool `json:"graceful,omitempty" protobuf:"varint,6,opt,name=graceful"`
	// expectedFingerprint is the SPKI SHA-256 fingerprint of the maintenance
	// certificate the node will present once reset (its console shows it),
	// as talosctl --cert-fingerprint takes it. The new TalosMachine carries
	// it, so that only that certificate is ever pinned. Without it, the node
	// is recognised by its system UUID, read before the reset.
	// +optional
	ExpectedFingerprint string `json:"expectedFingerprint,omitempty" protobuf:"bytes,7,opt,name=expectedFingerprint"`
}

// MachineReference names a TalosMachine in any namespace.
type MachineReference struct {
	// namespace of the TalosMachine.
	Namespace string `json:"namespace" protobuf:"bytes,1,opt,name=namespace"`
	// name of the TalosMachine.
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
}

// UnmanagedMachine is a Talos node outside Ichor, reached with a talosconfig
// that the user stores in a Secret; the Secret is deleted when the reset ends,
// whether it succeeded or not.
type UnmanagedMachine struct {
	// address is the host:port of the node's Talos API; the port defaults to
	// 50000. It must be in a provisioning network, as for any TalosMachine.
	Address string `json:"address" protobuf:"bytes,1,opt,name=address"`
	// talosconfigSecretRef is the Secret key holding a talosconfig (its
	// current context) able to reset the node, as os:admin. The Secret must
	// be of type ichor.dev/talosconfig, which says it is handed over to be
	// used once and deleted; creating the reclaim needs the get and delete
	// verbs on it.
	TalosconfigSecretRef SecretKeySelector `json:"talosconfigSecretRef" protobuf:"bytes,2,opt,name=talosconfigSecretRef"`
}

// SecretTypeTalosconfig is the type of a Secret holding a talosconfig that
// its owner hands over for one reset: ichor-controller uses it for that reset
// only and deletes it when the reset ends. ichor-controller deletes no Secret
// of another type but SecretTypeCARotation and SecretTypeKeyRotation.
const SecretTypeTalosconfig corev1.SecretType = "ichor.dev/talosconfig"

// SecretTypeCARotation is the type of the Secret that holds the new CAs
// (Talos API, Kubernetes) while a ca-rotation runs; ichor-controller
// deletes it once the secrets bundle holds them.
const SecretTypeCARotation corev1.SecretType = "ichor.dev/ca-rotation"

// SecretTypeKeyRotation is the type of the Secret that holds the new
// Kubernetes keys (service-account, secretbox) while a key-rotation runs;
// ichor-controller deletes it once the secrets bundle holds them.
const SecretTypeKeyRotation corev1.SecretType = "ichor.dev/key-rotation"

// LabelMachineReclaim marks the TalosMachine a MachineReclaim created, valued
// with the reclaim's name.
const LabelMachineReclaim = "ichor.dev/machine-reclaim"

// ReclaimPhase is where a reclaim is in its life.
// +enum
type ReclaimPhase string

const (
	// ReclaimPending: not started yet.
	ReclaimPending ReclaimPhase = "Pending"
	// ReclaimResetting: the node is being reset to maintenance mode.
	ReclaimResetting ReclaimPhase = "Resetting"
	// ReclaimJoining: the node is back in maintenance mode and joins the
	// cluster through its new TalosMachine.
	ReclaimJoining ReclaimPhase = "Joining"
	// ReclaimSucceeded: the new TalosMachine is Ready.
	ReclaimSucceeded ReclaimPhase = "Succeeded"
	// ReclaimFailed: the reclaim stopped; its Succeeded condition says why.
	ReclaimFailed ReclaimPhase = "Failed"
)

// MachineReclaimStatus is the progress of a reclaim.
type MachineReclaimStatus struct {
	// phase of the reclaim.
	// +optional
	Phase ReclaimPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=ReclaimPhase"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,2,opt,name=observedGeneration"`
	// reclaimedBy is the user who posted the reclaim subresource.
	// +optional
	ReclaimedBy string `json:"reclaimedBy,omitempty" protobuf:"bytes,3,opt,name=reclaimedBy"`
	// startedAt is when the reclaim began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty" protobuf:"bytes,4,opt,name=startedAt"`
	// completedAt is when it succeeded or failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,5,opt,name=completedAt"`
	// conditions of the reclaim.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,6,rep,name=conditions"`
	// address is the node's Talos API address, recorded before its reset.
	// +optional
	Address string `json:"address,omitempty" protobuf:"bytes,7,opt,name=address"`
	// machineName is the TalosMachine in this namespace through which the
	// node joins.
	// +optional
	MachineName string `json:"machineName,omitempty" protobuf:"bytes,8,opt,name=machineName"`
	// resetAt is when the node's reset was asked for: the old TalosMachine's
	// deletion, or the unmanaged node's acceptance of the Reset call.
	// +optional
	ResetAt *metav1.Time `json:"resetAt,omitempty" protobuf:"bytes,9,opt,name=resetAt"`
	// sourceUID is the UID of the TalosMachine of machineRef when the reclaim
	// began: only that machine is deleted, and one of that name with another
	// UID is a new machine, not the one reclaimed.
	// +optional
	SourceUID types.UID `json:"sourceUID,omitempty" protobuf:"bytes,10,opt,name=sourceUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// systemUUID is the node's system UUID, read before its reset (from the
	// old TalosMachine, or over the unmanaged node's Talos API). The node
	// that answers after the reset must report it before it is approved.
	// +optional
	SystemUUID string `json:"systemUUID,omitempty" protobuf:"bytes,11,opt,name=systemUUID"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaimList is a list of MachineReclaim objects.
type MachineReclaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []MachineReclaim `json:"items" protobuf:"bytes,2,rep,name=items"`
}
