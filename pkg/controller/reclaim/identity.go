package reclaim

import (
	"context"
	"fmt"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// identify checks that the node intake pinned for m is the one reset: it
// presents spec.expectedFingerprint when that is set, and reports the
// system UUID read before the reset when there is one. known is false until
// intake pinned a certificate and read the node's facts; mismatch says how
// the node is another.
func (s *state) identify(m *v1alpha1.TalosMachine) (known bool, mismatch string) {
	p, hw := m.Status.Maintenance, m.Status.Hardware
	if p == nil || p.CertificateFingerprint == "" || hw == nil {
		return false, ""
	}
	if want := s.rc.Spec.ExpectedFingerprint; want != "" && p.CertificateFingerprint != want {
		return true, fmt.Sprintf("TalosMachine %s pinned SPKI fingerprint %s, not spec.expectedFingerprint %s", m.Name, p.CertificateFingerprint, want)
	}
	if want := s.rc.Status.SystemUUID; want != "" && hw.UUID != want {
		return true, fmt.Sprintf("the node that answered at %s after the reset reports system UUID %s, not %s, the one read before the reset: it is another machine",
			m.Spec.Address, quoted(hw.UUID), want)
	}
	return true, ""
}

// proof says how the pinned node of m was recognised as the one reset.
func (s *state) proof(m *v1alpha1.TalosMachine) string {
	var by []string
	if s.rc.Status.SystemUUID != "" {
		by = append(by, "system UUID "+s.rc.Status.SystemUUID)
	}
	if s.rc.Spec.ExpectedFingerprint != "" {
		by = append(by, "the expected certificate "+s.rc.Spec.ExpectedFingerprint)
	} else {
		by = append(by, "certificate "+m.Status.Maintenance.CertificateFingerprint+" pinned")
	}
	return strings.Join(by, ", ")
}

// needsAPerson says why the new machine is not approved on the reclaim's
// behalf, or "" when it may be: a control plane receives every CA key of
// its cluster, and a reclaim begun without a system UUID on record (before
// this check existed) cannot tell its node from another.
func (s *state) needsAPerson() string {
	switch {
	case s.rc.Spec.Role == v1alpha1.MachineRoleControlPlane:
		return fmt.Sprintf("a control plane receives every CA key of TalosCluster %s", s.rc.Spec.ClusterName)
	case s.rc.Status.SystemUUID == "" && s.rc.Spec.ExpectedFingerprint == "":
		return "the reclaim recorded no system UUID before the reset to recognise the node by"
	}
	return ""
}

// decide writes a decision about m through talosmachines/approval, as every
// decision is written, conditional on the machine as read (its pin and
// facts); the API server records who decided.
func (r *Reconciler) decide(ctx context.Context, m *v1alpha1.TalosMachine, decision v1alpha1.ApprovalDecision, reason string) error {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: decision, Reason: reason}
	return r.Client.SubResource("approval").Update(ctx, m)
}

// maxReason keeps a decision's reason within what the API accepts;
// maxUUID is longer than any system UUID.
const (
	maxReason = 1024
	maxUUID   = 128
)

// quoted is a value a node reported, quoted and cut short: whatever it
// says, it cannot swell a message past what the API accepts.
func quoted(v string) string {
	const max = 64
	if len(v) > max {
		v = v[:max] + "..."
	}
	return fmt.Sprintf("%q", v)
}
