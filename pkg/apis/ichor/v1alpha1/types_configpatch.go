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
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TalosConfigPatchSpec   `json:"spec"`
	Status TalosConfigPatchStatus `json:"status,omitempty"`
}

// TalosConfigPatchSpec is the patch and what it targets.
type TalosConfigPatchSpec struct {
	// clusterName is the TalosCluster in this namespace the patch belongs to.
	ClusterName string `json:"clusterName"`
	// target selects the machines; empty means every machine of the cluster.
	// +optional
	Target PatchTarget `json:"target,omitempty"`
	// priority orders patches of the same target kind; lower applies first.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// patch is a Talos strategic-merge patch as YAML; several documents may be separated by ---.
	Patch string `json:"patch"`
	// disabled keeps the patch out of rendering without deleting it.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// PatchTarget selects machines. At most one field may be set.
type PatchTarget struct {
	// role targets every machine of that role.
	// +optional
	Role MachineRole `json:"role,omitempty"`
	// machines targets TalosMachines by name.
	// +optional
	// +listType=set
	Machines []string `json:"machines,omitempty"`
	// selector targets TalosMachines by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// TalosConfigPatchStatus says what the patch does and where it is applied.
type TalosConfigPatchStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Valid, Applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// override is a safety check the next change may go past, granted
	// through the override subresource; cleared when used.
	// +optional
	Override *OverrideStatus `json:"override,omitempty"`
	// effect of applying the patch.
	// +optional
	Effect ConfigEffect `json:"effect,omitempty"`
	// appliedMachines are the machines whose applied config includes this generation of the patch.
	// +optional
	// +listType=set
	AppliedMachines []string `json:"appliedMachines,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosConfigPatchList is a list of TalosConfigPatch objects.
type TalosConfigPatchList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []TalosConfigPatch `json:"items"`
}
