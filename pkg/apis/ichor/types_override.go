package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SafetyCheck names a safety check an admin can let one change go past.
type SafetyCheck string

const (
	CheckControlPlaneQuorum             SafetyCheck = "ControlPlaneQuorum"
	CheckPatchSecrets                   SafetyCheck = "PatchSecrets"
	CheckBootstrapWaitsForControlPlanes SafetyCheck = "BootstrapWaitsForControlPlanes"
	CheckClusterHealth                  SafetyCheck = "ClusterHealth"
	CheckTalosDowngrade                 SafetyCheck = "TalosDowngrade"
	// CheckProvisioningNetwork keeps a TalosMachine's address inside the
	// installation's provisioning networks. It is passed by holding the
	// override verb when the machine is created or moved, not through the
	// override subresource.
	CheckProvisioningNetwork SafetyCheck = "ProvisioningNetwork"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Override is the request body of the override subresources.
type Override struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Check is the safety check to go past.
	Check SafetyCheck
	// Reason says why.
	Reason string
}

// OverrideStatus is a granted override, consumed by the next change the check
// would have refused.
type OverrideStatus struct {
	Check  SafetyCheck
	Reason string
	By     string
	At     metav1.Time
}
