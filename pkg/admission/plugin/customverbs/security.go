package customverbs

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// SecurityDowngradeSubresource is where the update verb is asked for a write
// of a TalosCluster that weakens its spec.security (Hardening).
const SecurityDowngradeSubresource = ichor.SecurityDowngradeSubresource

// HardeningOption is one option of spec.security and how a change weakens it.
type HardeningOption struct {
	// Field is the option's path in the versioned API.
	Field string
	// Weakened says how the change from old to obj weakens the option, or "".
	Weakened func(obj, old *ichor.ClusterSecurity) string
}

// Hardening are the options of spec.security that protect a cluster,
// strongest last in each. installerImage is not here: its own field
// subresource keeps every change of it with admins. A new option of
// spec.security must be added here or to ichor.FieldSubresources (a test
// fails until it is).
var Hardening = []HardeningOption{
	{"spec.security.kubeletServingCertificates.enabled", func(obj, old *ichor.ClusterSecurity) string {
		return turnedOff(obj.KubeletServingCertificates.Enabled, old.KubeletServingCertificates.Enabled)
	}},
	{"spec.security.kubeletServingCertificates.verifyFromAPIServer", func(obj, old *ichor.ClusterSecurity) string {
		return turnedOff(obj.KubeletServingCertificates.VerifyFromAPIServer, old.KubeletServingCertificates.VerifyFromAPIServer)
	}},
	{"spec.security.secureBoot.required", func(obj, old *ichor.ClusterSecurity) string {
		return turnedOff(obj.SecureBoot.Required, old.SecureBoot.Required)
	}},
	{"spec.security.diskEncryption", func(obj, old *ichor.ClusterSecurity) string {
		from, to := diskEncryptionKey(old.DiskEncryption), diskEncryptionKey(obj.DiskEncryption)
		was, fromKnown := diskEncryptionStrength[from]
		now, toKnown := diskEncryptionStrength[to]
		// A key Ichor does not rank (validation refuses it) weakens, either way.
		if from == to || (fromKnown && toKnown && now > was) {
			return ""
		}
		return fmt.Sprintf("from %s to %s", describeDiskEncryption(from), describeDiskEncryption(to))
	}},
}

// diskEncryptionStrength ranks the disk-encryption keys: a TPM-sealed key
// opens only on its machine, a node-ID key for anyone who knows the
// machine's identity, and no encryption for anyone with the disk.
var diskEncryptionStrength = map[ichor.DiskEncryptionKey]int{"": 0, ichor.DiskEncryptionKeyNodeID: 1, ichor.DiskEncryptionKeyTPM: 2}

func diskEncryptionKey(e *ichor.DiskEncryption) ichor.DiskEncryptionKey {
	if e == nil {
		return ""
	}
	return e.Key
}

func describeDiskEncryption(k ichor.DiskEncryptionKey) string {
	if k == "" {
		return "none"
	}
	return fmt.Sprintf("the %s key", k)
}

func turnedOff(now, was bool) string {
	if was && !now {
		return "turned off"
	}
	return ""
}

// validateSecurityDowngrade asks update on talosclusters/security-downgrade
// for a write of a TalosCluster whose spec.security is weaker than it was
// (than the defaults, on create): a cluster an admin hardened stays so until
// an admin decides otherwise. Turning an option on needs nothing more.
func (p *Plugin) validateSecurityDowngrade(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	c, ok := a.GetObject().(*ichor.TalosCluster)
	if !ok || a.GetResource().Resource != "talosclusters" {
		return nil
	}
	old, isUpdate := a.GetOldObject().(*ichor.TalosCluster)
	if !isUpdate {
		if a.GetOperation() != admission.Create || a.GetSubresource() != "" {
			return nil
		}
		defaulted, err := defaultedEmpty(a, o)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
		}
		if old, ok = defaulted.(*ichor.TalosCluster); !ok {
			return apierrors.NewInternalError(fmt.Errorf("%s: a defaulted TalosCluster is a %T", PluginName, defaulted))
		}
	}
	var weakened []string
	for _, h := range Hardening {
		if how := h.Weakened(&c.Spec.Security, &old.Spec.Security); how != "" {
			weakened = append(weakened, h.Field+" "+how)
		}
	}
	if len(weakened) == 0 {
		return nil
	}
	return p.authorizeHeld(ctx, a, ichor.VerbUpdate, SecurityDowngradeSubresource,
		fmt.Sprintf("weaken the hardening of TalosCluster %q (%s)", c.Name, strings.Join(weakened, "; ")),
		"admins hold it; operators may only turn hardening on")
}
