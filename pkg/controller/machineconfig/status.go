package machineconfig

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
	"ichor.dev/ichor/pkg/talos"
)

// FieldManager owns the status fields this reconciler writes.
const FieldManager = "ichor-machineconfig"

// ownedConditions are the condition types this reconciler writes on m: its
// own, and, once the node left maintenance mode with its config, intake's
// certificate and reachability (intake stops looking at a configured
// machine; before that they are intake's alone).
func ownedConditions(m *v1alpha1.TalosMachine) []string {
	if m.Status.AppliedConfig == nil {
		return []string{v1alpha1.MachineConditionConfigApplied, v1alpha1.MachineConditionReady}
	}
	return []string{v1alpha1.MachineConditionConfigApplied, v1alpha1.MachineConditionReady, v1alpha1.MachineConditionCertificateVerified, v1alpha1.MachineConditionReachable}
}

// WriteStatus applies the fields of m's status this reconciler owns — phase,
// observed generation, node name, how the node booted, applied config and
// its conditions — with
// server-side apply under FieldManager, so that a field another writer set
// meanwhile (the approval, an admin's override grant, the approver's
// certificate record, intake's conditions) is neither overwritten nor
// dropped, whatever copy of the machine m is.
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
		st.WithAppliedConfig(ac)
	}
	st.WithConditions(statusapply.Conditions(m.Status.Conditions, ownedConditions(m)...)...)
	obj := ichorac.TalosMachine(m.Name, m.Namespace).WithStatus(st)
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// recordSecurity records how the node says it booted, when it says.
func recordSecurity(st *v1alpha1.TalosMachineStatus, sec *talos.Security) {
	if sec != nil {
		st.Security = &v1alpha1.MachineSecurityStatus{SecureBoot: sec.SecureBoot, BootedWithUKI: sec.BootedWithUKI,
			ModuleSignatureEnforced: sec.ModuleSignatureEnforced, PCRSigningKeyFingerprint: sec.PCRSigningKeyFingerprint}
	}
}

// secureBootRequired says why the cluster requires its machines to boot
// with SecureBoot, or "" when it does not.
func secureBootRequired(c *v1alpha1.TalosCluster) string {
	switch {
	case c.Spec.Security.SecureBoot.Required:
		return "the cluster requires (spec.security.secureBoot.required)"
	case c.Spec.Security.DiskEncryption != nil && c.Spec.Security.DiskEncryption.Key == v1alpha1.DiskEncryptionKeyTPM:
		return "the cluster's TPM-sealed disk encryption needs (spec.security.diskEncryption.key: tpm): the TPM seals the key only under SecureBoot"
	}
	return ""
}
