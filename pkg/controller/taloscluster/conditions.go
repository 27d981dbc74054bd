package taloscluster

// Condition types this reconciler writes on a TalosCluster (SecretsReady is
// clustersecrets').
const (
	// ConditionMachinesReady: every approved machine runs its config and is ready.
	ConditionMachinesReady = "MachinesReady"
	// ConditionBootstrapped: etcd was bootstrapped on the first control plane.
	ConditionBootstrapped = "Bootstrapped"
	// ConditionEtcdHealthy: every control plane is a voting etcd member.
	ConditionEtcdHealthy = "EtcdHealthy"
	// ConditionKubernetesAPIReachable: the cluster's Kubernetes API answers
	// ichor-controller's own identity.
	ConditionKubernetesAPIReachable = "KubernetesAPIReachable"
	// ConditionNodesReady: every approved machine has a Ready Node in the
	// cluster's Kubernetes.
	ConditionNodesReady = "NodesReady"
	// ConditionBootstrapTokenEnabled: the cluster's bootstrap token
	// authenticates, because a machine is joining; False once every machine
	// has a Node. Not part of Ready.
	ConditionBootstrapTokenEnabled = "BootstrapTokenEnabled"
	// ConditionReady: all of the above but BootstrapTokenEnabled.
	ConditionReady = "Ready"
)

// Reasons of those conditions.
const (
	ReasonAllReady            = "AllReady"
	ReasonMachinesNotReady    = "MachinesNotReady"
	ReasonNoControlPlane      = "NoControlPlane"
	ReasonBootstrapped        = "Bootstrapped"
	ReasonWaitingForControl   = "WaitingForControlPlane"
	ReasonBootstrapFailed     = "BootstrapFailed"
	ReasonMembersHealthy      = "MembersHealthy"
	ReasonMembersMissing      = "MembersMissing"
	ReasonEtcdUnreadable      = "EtcdUnreadable"
	ReasonReachable           = "Reachable"
	ReasonUnreachable         = "Unreachable"
	ReasonNotBootstrapped     = "NotBootstrapped"
	ReasonNodesReady          = "NodesReady"
	ReasonNodesNotReady       = "NodesNotReady"
	ReasonReady               = "Ready"
	ReasonNotReady            = "NotReady"
	ReasonSecretsNotReady     = "SecretsNotReady"
	ReasonAccessInstallFailed = "AccessInstallFailed"
	ReasonMachinesJoining     = "MachinesJoining"
	ReasonAllMachinesJoined   = "AllMachinesJoined"
	ReasonTokenSecretMissing  = "TokenSecretMissing"
	ReasonTokenUpdateFailed   = "TokenUpdateFailed"
)

// Event reasons.
const (
	EventBootstrapped           = "Bootstrapped"
	EventBootstrapFailed        = "BootstrapFailed"
	EventOverrideUsed           = "OverrideUsed"
	EventControllerAccess       = "ControllerAccessInstalled"
	EventClusterReady           = "ClusterReady"
	EventClusterDegraded        = "ClusterDegraded"
	EventKubernetesUnreachable  = "KubernetesUnreachable"
	EventBootstrapTokenEnabled  = "BootstrapTokenEnabled"
	EventBootstrapTokenDisabled = "BootstrapTokenDisabled"
)
