package machineconfig

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
)

// A node-reset that wipes a node's system disk sends it back to maintenance
// mode with a new certificate. The operation takes the machine back in two
// writes: Repin pins the certificate the node presents now in place of the
// one the wipe took away (as intake, which owns the pin), then ForgetConfig
// forgets the machine's config, so that this reconciler installs it again
// over the maintenance API, to that certificate only. In that order,
// intake, which looks at machines without a config, finds the new pin,
// never the old one.
//
// The certificate is trusted as intake trusts a first contact, and more
// narrowly: only at the machine's address, only for a node reporting the
// machine's system UUID, and only after the node, authenticated by its
// cluster's CA, accepted the reset. A machine without a recorded UUID, or
// one whose certificate an admin pinned from its console
// (spec.expectedFingerprint), is not taken back this way: the operation
// refuses to wipe it.

// Repin pins the certificate the node at m's address presented in contact,
// after operation reset it, if the node is m.
func Repin(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, contact intake.Result, operation string, now metav1.Time) error {
	switch {
	case contact.Err != nil || contact.Facts == nil:
		return fmt.Errorf("no maintenance-mode contact with the node at %s", m.Spec.Address)
	case m.Status.Hardware == nil || m.Status.Hardware.UUID == "":
		return errors.New("the machine has no system UUID on record to recognise its node by")
	case contact.Facts.UUID != m.Status.Hardware.UUID:
		return &NotThisMachineError{Address: m.Spec.Address, Want: m.Status.Hardware.UUID, Got: contact.Facts.UUID}
	}
	pinned := m.DeepCopy()
	intake.RepinAfterReset(&pinned.Status, m.Generation, contact, operation, now)
	if err := intake.WriteStatus(ctx, c, pinned); err != nil {
		return err
	}
	*m = *pinned
	return nil
}

// ForgetConfig forgets the config of m, repinned after operation reset its
// node, so that it is installed again.
//
// Without a config, intake's two conditions (certificate, reachability) are
// intake's alone again, and this reconciler's apply leaves them out. Server-
// side apply then removes the fields of them that only this reconciler
// owned — those it last changed — and would leave a condition without its
// reason, which validation refuses, on every retry. So intake first takes
// the conditions back as they stand (conditional on m's resourceVersion),
// and the apply that drops them removes nothing.
func ForgetConfig(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, operation string, now metav1.Time) error {
	// A status write of this reconciler from a copy read before the pin
	// (a restart while the node was reset) may have put the old pin's
	// certificate condition back: the conditions intake takes back say
	// what the pin on record says.
	if p := m.Status.Maintenance; p != nil {
		if cv := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified); cv == nil ||
			cv.Reason != v1alpha1.MachineReasonPinnedAfterReset || cv.LastTransitionTime.Before(&p.SeenAt) {
			intake.RepinAfterReset(&m.Status, m.Generation, intake.Result{Address: m.Spec.Address, Fingerprint: p.CertificateFingerprint}, operation, p.SeenAt)
		}
	}
	if err := intake.WriteStatus(ctx, c, m); err != nil {
		return err
	}
	forgot := m.DeepCopy()
	forgot.Status.AppliedConfig = nil
	forgot.Status.Phase = v1alpha1.MachinePhaseConfiguring
	msg := fmt.Sprintf("TalosOperation %s wiped the node's system disk; its config is installed again over the maintenance API, to the certificate pinned after the reset", operation)
	for _, condType := range []string{v1alpha1.MachineConditionConfigApplied, v1alpha1.MachineConditionReady} {
		meta.SetStatusCondition(&forgot.Status.Conditions, metav1.Condition{
			Type: condType, Status: metav1.ConditionFalse, Reason: v1alpha1.MachineReasonResetting, Message: msg,
			ObservedGeneration: m.Generation, LastTransitionTime: now,
		})
	}
	return WriteStatus(ctx, c, forgot)
}

// Repinned reports whether m's certificate was pinned at since or later:
// after a reset that began then. The pin is intake's field alone, which no
// other writer's stale copy can set back.
func Repinned(m *v1alpha1.TalosMachine, since metav1.Time) bool {
	return m.Status.Maintenance != nil && !m.Status.Maintenance.SeenAt.Before(&since)
}

// ConfigFromBeforeThePin reports whether m's applied config was sent before
// its pin: to the node before its reset, which has no config now. A
// machine repinned after a reset whose config was written back by a
// reconcile that read it before ForgetConfig has one.
func ConfigFromBeforeThePin(m *v1alpha1.TalosMachine) bool {
	return m.Status.AppliedConfig != nil && m.Status.Maintenance != nil &&
		m.Status.AppliedConfig.AppliedAt.Before(&m.Status.Maintenance.SeenAt)
}
