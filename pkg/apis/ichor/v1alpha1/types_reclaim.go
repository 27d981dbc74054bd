package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=Reclaim,verb=create,subresource=reclaim
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaim asks to reset a machine that belongs elsewhere (another
// Ichor cluster, or a Talos cluster Ichor does not manage) and bring it into
// a cluster in this namespace. Nothing happens until the reclaim subresource
// is posted.
type MachineReclaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MachineReclaimSpec   `json:"spec"`
	Status MachineReclaimStatus `json:"status,omitempty"`
}

// MachineReclaimSpec names the machine, where it goes, and how it is wiped.
// Exactly one of machineRef and unmanaged is set.
type MachineReclaimSpec struct {
	// machineRef is a TalosMachine Ichor manages in another cluster.
	// +optional
	MachineRef *MachineReference `json:"machineRef,omitempty"`
	// unmanaged is a Talos node Ichor does not manage.
	// +optional
	Unmanaged *UnmanagedMachine `json:"unmanaged,omitempty"`
	// clusterName is the TalosCluster in this namespace the machine joins.
	ClusterName string `json:"clusterName"`
	// role the machine takes in the new cluster; defaults to worker.
	// +optional
	Role MachineRole `json:"role,omitempty"`
	// wipe selects the disks to wipe; defaults to all.
	// +optional
	Wipe WipeMode `json:"wipe,omitempty"`
	// graceful leaves the old cluster's etcd and drains the node first; defaults to true.
	// +optional
	Graceful *bool `json:"graceful,omitempty"`
}

// MachineReference names a TalosMachine in any namespace.
type MachineReference struct {
	// namespace of the TalosMachine.
	Namespace string `json:"namespace"`
	// name of the TalosMachine.
	Name string `json:"name"`
}

// UnmanagedMachine is a Talos node outside Ichor, reached with a talosconfig
// that the user stores in a Secret; the Secret is deleted when the reset ends.
type UnmanagedMachine struct {
	// address is the host:port of the node's Talos API; the port defaults to 50000.
	Address string `json:"address"`
	// talosconfigSecretRef is the Secret key holding a talosconfig able to reset the node.
	TalosconfigSecretRef SecretKeySelector `json:"talosconfigSecretRef"`
}

// ReclaimPhase is where a reclaim is in its life.
// +enum
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
	// +optional
	Phase ReclaimPhase `json:"phase,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// reclaimedBy is the user who posted the reclaim subresource.
	// +optional
	ReclaimedBy string `json:"reclaimedBy,omitempty"`
	// startedAt is when the reclaim began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when it succeeded or failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// conditions of the reclaim.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaimList is a list of MachineReclaim objects.
type MachineReclaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MachineReclaim `json:"items"`
}
