package machineconfig

// Event reasons.
const (
	EventConfigApplied       = "ConfigApplied"
	EventConfigFailed        = "ConfigFailed"
	EventCertificateMismatch = "CertificateMismatch"
	EventSecureBootRequired  = "SecureBootRequired"
	EventMachineReady        = "MachineReady"
	EventRolloutWaiting      = "RolloutWaiting"
)
