// Package configstatus writes the part of a TalosMachine's status that the
// config reconciler (pkg/controller/machineconfig) owns: phase, observed
// generation, node name, how the node booted, the applied config and its
// conditions, under one field manager. The config reconciler writes them
// with WriteStatus; the operation controller, taking a machine back after a
// node-reset wiped it, forgets its config with ForgetConfig, as that
// reconciler, so that it is installed again. Intake's share of the status
// is pkg/intake's.
package configstatus

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/statusapply"
)

// FieldManager owns the status fields the config reconciler writes.
const FieldManager = v1alpha1.FieldManagerMachineConfig

// ownedConditions are the condition types the config reconciler writes on
// m, from its row of the table of status writers: its own, and, once the
// node left maintenance mode with its config, the ones it inherits,
// intake's certificate and reachability (intake stops looking at a
// configured machine; before that they are intake's alone).
func ownedConditions(m *v1alpha1.TalosMachine) []string {
	owned := v1alpha1.OwnedConditions(m, FieldManager)
	if m.Status.AppliedConfig == nil {
		return owned
	}
	return append(owned, v1alpha1.InheritedConditions(m, FieldManager)...)
}

// WriteStatus applies the fields of m's status the config reconciler owns —
// phase, observed generation, node name, how the node booted, applied
// config and its conditions — with server-side apply under FieldManager, so
// that a field another writer set meanwhile (the approval, an admin's
// override grant, the approver's certificate record, intake's conditions)
// is neither overwritten nor dropped, whatever copy of the machine m is.
func WriteStatus(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine) error {
	st := ichorac.TalosMachineStatus().WithObservedGeneration(m.Status.ObservedGeneration)
	if m.Status.Phase != "" {
		st.WithPhase(m.Status.Phase)
	}
	if m.Status.NodeName != "" {
		st.WithNodeName(m.Status.NodeName)
	}
	if sec := m.Status.Security; sec != nil {
		st.WithSecurity(ichorac.MachineSecurityStatus().WithSecureBoot(sec.SecureBoot).WithBootedWithUKI(sec.BootedWithUKI).
			WithModuleSignatureEnforced(sec.ModuleSignatureEnforced).WithPCRSigningKeyFingerprint(sec.PCRSigningKeyFingerprint))
	}
	if a := m.Status.AppliedConfig; a != nil {
		ac := ichorac.AppliedConfigStatus().WithHash(a.Hash).WithAppliedAt(a.AppliedAt)
		if a.Effect != "" {
			ac.WithEffect(a.Effect)
		}
		if a.Contract != "" {
			ac.WithContract(a.Contract)
		}
		st.WithAppliedConfig(ac)
	}
	st.WithConditions(statusapply.Conditions(m.Status.Conditions, ownedConditions(m)...)...)
	obj := ichorac.TalosMachine(m.Name, m.Namespace).WithStatus(st)
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// ForgetConfig forgets the config of m, repinned (intake.Repin) after
// operation reset its node, so that the config reconciler installs it
// again.
//
// Without a config, intake's two conditions (certificate, reachability) are
// intake's alone again, and the config reconciler's apply leaves them out.
// Server-side apply then removes the fields of them that only that
// reconciler owned — those it last changed — and would leave a condition
// without its reason, which validation refuses, on every retry. So intake
// first takes the conditions back as they stand (conditional on m's
// resourceVersion), and the apply that drops them removes nothing.
func ForgetConfig(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, operation string, now metav1.Time) error {
	// A status write of the config reconciler from a copy read before the
	// pin (a restart while the node was reset) may have put the old pin's
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

// ConfigFromBeforeThePin reports whether m's applied config was sent before
// its pin: to the node before its reset, which has no config now. A
// machine repinned after a reset whose config was written back by a
// reconcile that read it before ForgetConfig has one.
func ConfigFromBeforeThePin(m *v1alpha1.TalosMachine) bool {
	return m.Status.AppliedConfig != nil && m.Status.Maintenance != nil &&
		m.Status.AppliedConfig.AppliedAt.Before(&m.Status.Maintenance.SeenAt)
}
