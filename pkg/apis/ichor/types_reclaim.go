package ichor

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaim asks to reset a machine that belongs elsewhere (another
// Ichor cluster, or a Talos cluster Ichor does not manage) and bring it into
// a cluster in this namespace. Nothing happens until the reclaim subresource
// is posted.
type MachineReclaim struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   MachineReclaimSpec
	Status MachineReclaimStatus
}

// MachineReclaimSpec names the machine, where it goes, and how it is wiped.
// Exactly one of machineRef and unmanaged is set.
type MachineReclaimSpec struct {
	// machineRef is a TalosMachine Ichor manages in another cluster.
	MachineRef *MachineReference
	// unmanaged is a Talos node Ichor does not manage.
	Unmanaged *UnmanagedMachine
	// clusterName is the TalosCluster in this namespace the machine joins.
	ClusterName string
	// role the machine takes in the new cluster; defaults to worker.
	Role MachineRole
	// wipe is what the reset of an unmanaged node wipes: all or system-disk.
	Wipe WipeMode
	// graceful has an unmanaged node leave etcd and drain first; defaults to true.
	Graceful *bool
	// expectedFingerprint is the maintenance certificate the reset node will present.
	ExpectedFingerprint string
}

// MachineReference names a TalosMachine in any namespace.
type MachineReference struct {
	// namespace of the TalosMachine.
	Namespace string
	// name of the TalosMachine.
	Name string
}

// UnmanagedMachine is a Talos node outside Ichor, reached with a talosconfig
// that the user stores in a Secret; the Secret is deleted when the reset ends.
type UnmanagedMachine struct {
	// address is the host:port of the node's Talos API; the port defaults to 50000.
	Address string
	// talosconfigSecretRef is the Secret key holding a talosconfig able to reset the node.
	TalosconfigSecretRef SecretKeySelector
}

// ReclaimPhase is where a reclaim is in its life.
type ReclaimPhase string

const (
	ReclaimPending   ReclaimPhase = "Pending"
	ReclaimResetting ReclaimPhase = "Resetting"
	ReclaimJoining   ReclaimPhase = "Joining"
	ReclaimSucceeded ReclaimPhase = "Succeeded"
	ReclaimFailed    ReclaimPhase = "Failed"
)

// MachineReclaimStatus is the progress of a reclaim.
type MachineReclaimStatus struct {
	// phase of the reclaim.
	Phase ReclaimPhase
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// reclaimedBy is the user who posted the reclaim subresource.
	ReclaimedBy string
	// startedAt is when the reclaim began.
	StartedAt *metav1.Time
	// completedAt is when it succeeded or failed.
	CompletedAt *metav1.Time
	// conditions of the reclaim.
	Conditions []metav1.Condition
	// address is the node's Talos API address, recorded before its reset.
	Address string
	// machineName is the TalosMachine in this namespace through which the node joins.
	MachineName string
	// resetAt is when the node's reset was asked for.
	ResetAt *metav1.Time
	// sourceUID is the UID of the TalosMachine of machineRef when the reclaim began.
	SourceUID types.UID
	// systemUUID is the node's system UUID, read before its reset.
	SystemUUID string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaimList is a list of MachineReclaim objects.
type MachineReclaimList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []MachineReclaim
}
