package machineconfig

import (
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

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
