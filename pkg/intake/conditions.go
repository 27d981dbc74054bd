package intake

// Event reasons intake emits on a TalosMachine.
const (
	EventCertificatePinned   = "CertificatePinned"
	EventCertificateMismatch = "CertificateMismatch"
	EventUnreachable         = "Unreachable"
	EventReachable           = "Reachable"
	EventAddressInUse        = "AddressInUse"
)
