package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosConfigPatch is a machine-config patch for a cluster, one of its roles, or
// chosen machines. Patches apply in a fixed order: cluster-wide, then role, then
// machine, and within each by ascending priority, then name.
type TalosConfigPatch struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosConfigPatchSpec
	Status TalosConfigPatchStatus
}

// TalosConfigPatchSpec is the patch and what it targets.
type TalosConfigPatchSpec struct {
	// clusterName is the TalosCluster in this namespace the patch belongs to.
	ClusterName string
	// target selects the machines; empty means every machine of the cluster.
	Target PatchTarget
	// priority orders patches of the same target kind; lower applies first.
	Priority int32
	// patch is a Talos strategic-merge patch as YAML; several documents may be separated by ---.
	Patch string
	// disabled keeps the patch out of rendering without deleting it.
	Disabled bool
}

// PatchTarget selects machines. At most one field may be set.
type PatchTarget struct {
	// role targets every machine of that role.
	Role MachineRole
	// machines targets TalosMachines by name.
	Machines []string
	// selector targets TalosMachines by label.
	Selector *metav1.LabelSelector
}

// TalosConfigPatchStatus says what the patch does and where it is applied.
type TalosConfigPatchStatus struct {
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// conditions: Valid, Applied.
	Conditions []metav1.Condition
	// Override is a granted safety-check override, cleared when used.
	Override *OverrideStatus
	// effect of applying the patch.
	Effect ConfigEffect
	// appliedMachines are the machines whose applied config includes this generation of the patch.
	AppliedMachines []string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosConfigPatchList is a list of TalosConfigPatch objects.
type TalosConfigPatchList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosConfigPatch
}
