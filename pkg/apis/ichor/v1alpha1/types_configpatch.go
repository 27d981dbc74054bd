package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=Override,verb=create,subresource=override,input=Override,result=TalosConfigPatch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosConfigPatch is a machine-config patch for a cluster, one of its roles, or
// chosen machines. Patches apply in a fixed order: cluster-wide, then role, then
// machine, and within each by ascending priority, then name.
type TalosConfigPatch struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosConfigPatchSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosConfigPatchStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// TalosConfigPatchSpec is the patch and what it targets.
type TalosConfigPatchSpec struct {
	// clusterName is the TalosCluster in this namespace the patch belongs to.
	ClusterName string `json:"clusterName" protobuf:"bytes,1,opt,name=clusterName"`
	// target selects the machines; empty means every machine of the cluster.
	// +optional
	Target PatchTarget `json:"target,omitempty" protobuf:"bytes,2,opt,name=target"`
	// priority orders patches of the same target kind; lower applies first.
	// +optional
	Priority int32 `json:"priority,omitempty" protobuf:"varint,3,opt,name=priority"`
	// patch is a Talos strategic-merge patch as YAML; several documents may be separated by ---.
	Patch string `json:"patch" protobuf:"bytes,4,opt,name=patch"`
	// disabled keeps the patch out of rendering without deleting it.
	// +optional
	Disabled bool `json:"disabled,omitempty" protobuf:"varint,5,opt,name=disabled"`
}

// PatchTarget selects machines. At most one field may be set.
type PatchTarget struct {
	// role targets every machine of that role.
	// +optional
	Role MachineRole `json:"role,omitempty" protobuf:"bytes,1,opt,name=role,casttype=MachineRole"`
	// machines targets TalosMachines by name.
	// +optional
	// +listType=set
	Machines []string `json:"machines,omitempty" protobuf:"bytes,2,rep,name=machines"`
	// selector targets TalosMachines by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty" protobuf:"bytes,3,opt,name=selector"`
}

// TalosConfigPatchStatus says what the patch does and where it is applied.
type TalosConfigPatchStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// conditions: Valid, Applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
	// override is a safety check the next change may go past, granted
	// through the override subresource; cleared when used.
	// +optional
	Override *OverrideStatus `json:"override,omitempty" protobuf:"bytes,3,opt,name=override"`
	// effect of applying the patch.
	// +optional
	Effect ConfigEffect `json:"effect,omitempty" protobuf:"bytes,4,opt,name=effect,casttype=ConfigEffect"`
	// appliedMachines are the machines whose applied config includes this generation of the patch.
	// +optional
	// +listType=set
	AppliedMachines []string `json:"appliedMachines,omitempty" protobuf:"bytes,5,rep,name=appliedMachines"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosConfigPatchList is a list of TalosConfigPatch objects.
type TalosConfigPatchList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosConfigPatch `json:"items" protobuf:"bytes,2,rep,name=items"`
}
