package taloscluster

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
