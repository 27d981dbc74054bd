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
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   MachineReclaimSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status MachineReclaimStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// MachineReclaimSpec names the machine, where it goes, and how it is wiped.
// Exactly one of machineRef and unmanaged is set.
type MachineReclaimSpec struct {
	// machineRef is a TalosMachine Ichor manages in another cluster.
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
	// wipe selects the disks to wipe; defaults to all.
	// +optional
	Wipe WipeMode `json:"wipe,omitempty" protobuf:"bytes,5,opt,name=wipe,casttype=WipeMode"`
	// graceful leaves the old cluster's etcd and drains the node first; defaults to true.
	// +optional
	Graceful *bool `json:"graceful,omitempty" protobuf:"varint,6,opt,name=graceful"`
}

// MachineReference names a TalosMachine in any namespace.
type MachineReference struct {
	// namespace of the TalosMachine.
	Namespace string `json:"namespace" protobuf:"bytes,1,opt,name=namespace"`
	// name of the TalosMachine.
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
}

// UnmanagedMachine is a Talos node outside Ichor, reached with a talosconfig
// that the user stores in a Secret; the Secret is deleted when the reset ends.
type UnmanagedMachine struct {
	// address is the host:port of the node's Talos API; the port defaults to 50000.
	Address string `json:"address" protobuf:"bytes,1,opt,name=address"`
	// talosconfigSecretRef is the Secret key holding a talosconfig able to reset the node.
	TalosconfigSecretRef SecretKeySelector `json:"talosconfigSecretRef" protobuf:"bytes,2,opt,name=talosconfigSecretRef"`
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
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineReclaimList is a list of MachineReclaim objects.
type MachineReclaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []MachineReclaim `json:"items" protobuf:"bytes,2,rep,name=items"`
}
