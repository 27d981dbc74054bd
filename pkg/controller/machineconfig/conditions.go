package machineconfig

// Event reasons.
const (
	EventConfigApplied       = "ConfigApplied"
	EventConfigFailed        = "ConfigFailed"
	EventCertificateMismatch = "CertificateMismatch"
	EventMachineReady        = "MachineReady"
	EventRolloutWaiting      = "RolloutWaiting"
)
