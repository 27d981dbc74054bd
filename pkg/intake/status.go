package intake

import (
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// Change says what Record changed that people should hear about.
type Change struct {
	// Pinned: the certificate of first contact was pinned.
	Pinned bool
	// Mismatch: the node presents another certificate than the pinned one,
	// and did not at the previous contact (or presented yet another).
	Mismatch *talos.FingerprintMismatchError
	// Unreachable: the node stopped answering (or never did).
	Unreachable bool
	// Recovered: the node answers again with the pinned certificate.
	Recovered bool
}

// Record writes the outcome of a contact into a machine's status at now:
// the pin on first contact, facts, conditions, phase and observedGeneration.
// It never changes a pin that is already set.
func Record(s *v1alpha1.TalosMachineStatus, generation int64, r Result, now metav1.Time) Change {
	var ch Change
	// A copy: setting conditions below updates the slice in place.
	var wasReachable *metav1.Condition
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.MachineConditionReachable); c != nil {
		wasReachable = c.DeepCopy()
	}
	set := func(condType string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: message,
			ObservedGeneration: generation, LastTransitionTime: now,
		})
	}

	mismatch, isMismatch := r.Mismatch()
	switch {
	case r.Err == nil:
		if s.Maintenance == nil {
			s.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: r.Fingerprint, SeenAt: now}
			ch.Pinned = true
			if r.Expected {
				set(v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonMatchesExpectedFingerprint,
					fmt.Sprintf("pinned SPKI fingerprint %s, the expected one, presented by the node at %s", r.Fingerprint, r.Address))
			} else {
				set(v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonPinnedOnFirstContact,
					fmt.Sprintf("pinned SPKI fingerprint %s, presented by the node at %s at first contact", r.Fingerprint, r.Address))
			}
		} else if c := meta.FindStatusCondition(s.Conditions, v1alpha1.MachineConditionCertificateVerified); c == nil || c.Status != metav1.ConditionTrue {
			set(v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonMatchesPin,
				fmt.Sprintf("the node at %s presents the pinned certificate", r.Address))
		}
		s.Hardware = hardwareStatus(r.Facts)
		if validVersion(r.Facts.TalosVersion) {
			s.TalosVersion = r.Facts.TalosVersion
		}
		set(v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonContacted,
			fmt.Sprintf("the maintenance API at %s answered", r.Address))
		ch.Recovered = wasReachable != nil && wasReachable.Status == metav1.ConditionFalse

	case isMismatch:
		msg := MismatchMessage(mismatch)
		prev := meta.FindStatusCondition(s.Conditions, v1alpha1.MachineConditionCertificateVerified)
		if prev == nil || prev.Status != metav1.ConditionFalse || prev.Message != msg {
			ch.Mismatch = mismatch
		}
		set(v1alpha1.MachineConditionCertificateVerified, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch, msg)
		set(v1alpha1.MachineConditionReachable, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch,
			fmt.Sprintf("something answers at %s, but not with the machine's pinned certificate", r.Address))

	default:
		if meta.FindStatusCondition(s.Conditions, v1alpha1.MachineConditionCertificateVerified) == nil {
			set(v1alpha1.MachineConditionCertificateVerified, metav1.ConditionUnknown, v1alpha1.MachineReasonNotContacted, "the node has not been reached yet")
		}
		set(v1alpha1.MachineConditionReachable, metav1.ConditionFalse, v1alpha1.MachineReasonConnectionFailed, UnreachableMessage(r.Address))
		ch.Unreachable = wasReachable == nil || wasReachable.Status != metav1.ConditionFalse ||
			wasReachable.Reason != v1alpha1.MachineReasonConnectionFailed
	}

	recordApproval(s, generation, now)
	s.Phase = phase(s)
	s.ObservedGeneration = generation
	return ch
}

// recordApproval mirrors status.approval in the Approved condition.
func recordApproval(s *v1alpha1.TalosMachineStatus, generation int64, now metav1.Time) {
	c := metav1.Condition{Type: v1alpha1.MachineConditionApproved, ObservedGeneration: generation, LastTransitionTime: now}
	switch a := s.Approval; {
	case a == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.MachineReasonAwaitingApproval, "awaiting an operator's approval"
	case a.Decision == v1alpha1.ApprovalApproved:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.MachineReasonApproved, "approved by "+a.By
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.MachineReasonRejected, "rejected by "+a.By+"; it is never configured"
	}
	meta.SetStatusCondition(&s.Conditions, c)
}

// phase summarises intake's conditions: a machine that does not answer with
// its pinned certificate is Unreachable; otherwise it is where approval left it.
func phase(s *v1alpha1.TalosMachineStatus) v1alpha1.MachinePhase {
	switch {
	case !meta.IsStatusConditionTrue(s.Conditions, v1alpha1.MachineConditionReachable):
		return v1alpha1.MachinePhaseUnreachable
	case s.Approval == nil:
		return v1alpha1.MachinePhasePendingApproval
	case s.Approval.Decision == v1alpha1.ApprovalApproved:
		return v1alpha1.MachinePhaseApproved
	default:
		return v1alpha1.MachinePhaseRejected
	}
}

// hardwareStatus is the API form of facts.
func hardwareStatus(f *talos.Facts) *v1alpha1.HardwareStatus {
	hw := &v1alpha1.HardwareStatus{UUID: f.UUID, Serial: f.Serial}
	for _, d := range f.Disks {
		size := int64(math.MaxInt64)
		if d.SizeBytes < math.MaxInt64 {
			size = int64(d.SizeBytes)
		}
		hw.Disks = append(hw.Disks, v1alpha1.Disk{Path: d.Path, SizeBytes: size, Model: d.Model, Serial: d.Serial, Transport: d.Transport})
	}
	for _, a := range f.Addresses {
		hw.Addresses = append(hw.Addresses, a.String())
	}
	return hw
}

// validVersion is true for what the API accepts as status.talosVersion; a
// node reporting anything else keeps its previous version in status rather
// than having the whole status update refused.
func validVersion(v string) bool {
	if !strings.HasPrefix(v, "v") {
		return false
	}
	_, err := utilversion.ParseSemantic(v)
	return err == nil
}

// MismatchMessage is the CertificateVerified message of a node presenting
// another certificate than the pinned one; every reconciler that notices
// the mismatch writes the same, so the condition does not flap.
func MismatchMessage(m *talos.FingerprintMismatchError) string {
	return m.Error() + "; nothing is sent to it"
}

// UnreachableMessage is what status and Events say of a node that did not
// answer. It says nothing of why (refused, timed out, not TLS): whoever may
// write a machine's address would otherwise read a port scanner's answers
// off the status. The controller's log has the error.
func UnreachableMessage(address string) string {
	return fmt.Sprintf("the Talos API at %s did not answer; the controller's log says why", address)
}

// RecordAddressInUse records that the machine's node is not contacted,
// since holder has its address first.
func RecordAddressInUse(s *v1alpha1.TalosMachineStatus, generation int64, address, holder string, now metav1.Time) {
	msg := fmt.Sprintf("%s has the address %s first: nothing is sent to the node there while it does; delete one of the two", holder, address)
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.MachineConditionCertificateVerified, Status: metav1.ConditionUnknown, Reason: v1alpha1.MachineReasonAddressInUse, Message: msg},
		{Type: v1alpha1.MachineConditionReachable, Status: metav1.ConditionUnknown, Reason: v1alpha1.MachineReasonAddressInUse, Message: msg},
	} {
		c.ObservedGeneration, c.LastTransitionTime = generation, now
		meta.SetStatusCondition(&s.Conditions, c)
	}
	s.Phase = phase(s)
	s.ObservedGeneration = generation
}

// RepinAfterReset records the maintenance certificate of a node that a
// node-reset sent back to maintenance mode, as contacted in r: its old
// certificate went with the wipe. The caller checked that r's node is this
// machine (its system UUID) and that the reset was its own.
func RepinAfterReset(s *v1alpha1.TalosMachineStatus, generation int64, r Result, operation string, now metav1.Time) {
	s.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: r.Fingerprint, SeenAt: now}
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.MachineConditionCertificateVerified, Status: metav1.ConditionTrue, Reason: v1alpha1.MachineReasonPinnedAfterReset,
			Message: fmt.Sprintf("pinned SPKI fingerprint %s, presented by the node at %s in maintenance mode after TalosOperation %s reset it, with the machine's system UUID",
				r.Fingerprint, r.Address, operation)},
		{Type: v1alpha1.MachineConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.MachineReasonContacted,
			Message: fmt.Sprintf("the maintenance API at %s answered", r.Address)},
	} {
		c.ObservedGeneration, c.LastTransitionTime = generation, now
		meta.SetStatusCondition(&s.Conditions, c)
	}
}

// RecordConfigured records, for the controller that configures machines,
// that an approved machine's node left maintenance mode with its config and
// answers over mutual TLS against its cluster's Talos CA: its maintenance
// certificate is gone with maintenance mode, so a mismatch seen meanwhile
// (before the install was on record) was the node itself.
func RecordConfigured(s *v1alpha1.TalosMachineStatus, generation int64, address string, now metav1.Time) {
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.MachineConditionCertificateVerified, Status: metav1.ConditionTrue, Reason: v1alpha1.MachineReasonLeftMaintenance,
			Message: fmt.Sprintf("the node at %s left maintenance mode with its config and presents its cluster's Talos API certificate", address)},
		{Type: v1alpha1.MachineConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.MachineReasonLeftMaintenance,
			Message: fmt.Sprintf("the node at %s answers over mutual TLS", address)},
	} {
		c.ObservedGeneration, c.LastTransitionTime = generation, now
		meta.SetStatusCondition(&s.Conditions, c)
	}
}
