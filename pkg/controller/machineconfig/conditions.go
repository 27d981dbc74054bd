package machineconfig

// Condition types this reconciler writes on a TalosMachine.
const (
	// ConditionConfigApplied says whether the node was sent the config
	// rendered from the current cluster, machine and patches.
	ConditionConfigApplied = "ConfigApplied"
	// ConditionReady says whether the node runs that config and reports
	// itself ready.
	ConditionReady = "Ready"
)

// Reasons of those conditions.
const (
	ReasonInstalled           = "Installed"
	ReasonApplied             = "Applied"
	ReasonUpToDate            = "UpToDate"
	ReasonClusterNotFound     = "ClusterNotFound"
	ReasonSecretsNotReady     = "SecretsNotReady"
	ReasonRenderFailed        = "RenderFailed"
	ReasonCertificateMismatch = "CertificateMismatch"
	ReasonApplyFailed         = "ApplyFailed"
	ReasonWaitingForRollout   = "WaitingForRollout"
	ReasonRunning             = "Running"
	ReasonBooting             = "Booting"
	ReasonRebooting           = "Rebooting"
	ReasonNotReachable        = "NotReachable"
)

// Event reasons.
const (
	EventConfigApplied       = "ConfigApplied"
	EventConfigFailed        = "ConfigFailed"
	EventCertificateMismatch = "CertificateMismatch"
	EventMachineReady        = "MachineReady"
	EventRolloutWaiting      = "RolloutWaiting"
)
