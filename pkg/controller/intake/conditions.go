package intake

// Condition types intake writes on a TalosMachine.
const (
	// ConditionReachable says whether the node's Talos API answered at the
	// last contact, presenting the certificate it should.
	ConditionReachable = "Reachable"
	// ConditionCertificateVerified says whether the node presents the
	// pinned maintenance certificate. Configuration is only ever sent when
	// it is True.
	ConditionCertificateVerified = "CertificateVerified"
	// ConditionApproved mirrors status.approval: an operator's decision to
	// admit the machine into its cluster.
	ConditionApproved = "Approved"
)

// Reasons of those conditions.
const (
	ReasonContacted            = "Contacted"
	ReasonConnectionFailed     = "ConnectionFailed"
	ReasonCertificateMismatch  = "CertificateMismatch"
	ReasonPinnedOnFirstContact = "PinnedOnFirstContact"
	ReasonMatchesPin           = "MatchesPin"
	// ReasonLeftMaintenance: the node was installed and answers with its
	// cluster's certificate.
	ReasonLeftMaintenance = "LeftMaintenance"
	// ReasonMatchesExpectedFingerprint: the pin is the certificate the user
	// expected (spec.expectedFingerprint), not trust on first use.
	ReasonMatchesExpectedFingerprint = "MatchesExpectedFingerprint"
	ReasonNotContacted               = "NotContacted"
	ReasonAwaitingApproval           = "AwaitingApproval"
	ReasonApproved                   = "Approved"
	ReasonRejected                   = "Rejected"
)

// Event reasons intake emits on a TalosMachine.
const (
	EventCertificatePinned   = "CertificatePinned"
	EventCertificateMismatch = "CertificateMismatch"
	EventUnreachable         = "Unreachable"
	EventReachable           = "Reachable"
)
