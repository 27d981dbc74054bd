package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SafetyCheck names a safety check an admin can let one change go past.
// +enum
type SafetyCheck string

const (
	// CheckControlPlaneQuorum refuses deleting a control plane that would
	// leave etcd short of quorum, or the last one of a cluster (TalosMachine).
	CheckControlPlaneQuorum SafetyCheck = "ControlPlaneQuorum"
	// CheckPatchSecrets refuses a TalosConfigPatch that touches the secrets
	// bundle's fields (TalosConfigPatch).
	CheckPatchSecrets SafetyCheck = "PatchSecrets"
	// CheckBootstrapWaitsForControlPlanes keeps etcd from being bootstrapped
	// until every configured control plane runs (TalosCluster).
	CheckBootstrapWaitsForControlPlanes SafetyCheck = "BootstrapWaitsForControlPlanes"
	// CheckClusterHealth keeps an operation from starting, and each of its
	// steps from taking a node away, while the cluster is not healthy: a
	// machine not Ready, an etcd member down (TalosCluster). The operation
	// that goes past it uses the override up.
	CheckClusterHealth SafetyCheck = "ClusterHealth"
	// CheckTalosDowngrade keeps a talos-upgrade from taking a machine to an
	// older Talos than it runs (TalosCluster). The operation that goes past
	// it uses the override up; Talos's installer may still refuse the path.
	CheckTalosDowngrade SafetyCheck = "TalosDowngrade"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Override is the request body of the override subresource of TalosClusters,
// TalosMachines and TalosConfigPatches: it lets the next change of the object
// past one safety check. It needs the override verb on the resource; the
// grant is recorded in the object's status.override and as a Warning Event
// naming the user.
type Override struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name, when set, must be the object's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// check is the safety check to go past.
	Check SafetyCheck `json:"check" protobuf:"bytes,2,opt,name=check,casttype=SafetyCheck"`
	// reason says why; it is recorded with the user's name.
	Reason string `json:"reason" protobuf:"bytes,3,opt,name=reason"`
}

// OverrideStatus is a granted override, consumed by the next change the check
// would have refused.
type OverrideStatus struct {
	// check is the safety check the next change may go past.
	Check SafetyCheck `json:"check" protobuf:"bytes,1,opt,name=check,casttype=SafetyCheck"`
	// reason given by the user.
	Reason string `json:"reason" protobuf:"bytes,2,opt,name=reason"`
	// by is the user who granted the override.
	By string `json:"by" protobuf:"bytes,3,opt,name=by"`
	// at is when it was granted.
	At metav1.Time `json:"at" protobuf:"bytes,4,opt,name=at"`
}
