package validation

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// ValidateTalosMachine checks a TalosMachine on create.
func ValidateTalosMachine(m *ichor.TalosMachine) field.ErrorList {
	errs := validateNamespacedMeta(&m.ObjectMeta)
	return append(errs, validateTalosMachineSpec(&m.Spec, field.NewPath("spec"))...)
}

// ValidateTalosMachineUpdate checks a TalosMachine on update. A machine that
// belongs to a cluster keeps that cluster and its role: moving it is a
// MachineReclaim. Once decided about, a machine keeps its address; before,
// a new address drops what was learned at the old one (see the registry).
func ValidateTalosMachineUpdate(m, old *ichor.TalosMachine) field.ErrorList {
	errs := ValidateTalosMachineFieldUpdate(m, old)
	return append(errs, validateFieldSubresources("talosmachines", m, old)...)
}

// ValidateTalosMachineFieldUpdate checks an update through a subresource
// that writes one part of the spec (schematic): the whole object must stay
// valid.
func ValidateTalosMachineFieldUpdate(m, old *ichor.TalosMachine) field.ErrorList {
	errs := validateMetaUpdate(&m.ObjectMeta, &old.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateTalosMachineSpec(&m.Spec, spec)...)
	if old.Spec.ClusterName != "" {
		const hint = "a machine that belongs to a cluster moves only through a MachineReclaim"
		errs = append(errs, validateImmutable(m.Spec.ClusterName, old.Spec.ClusterName, spec.Child("clusterName"), hint)...)
		errs = append(errs, validateImmutable(m.Spec.Role, old.Spec.Role, spec.Child("role"), hint)...)
	}
	if old.Status.Approval != nil {
		// The pinned certificate and the decision were about the node at this
		// address; pointed elsewhere, a deletion would reset another node.
		decided := "the machine was " + strings.ToLower(string(old.Status.Approval.Decision))
		errs = append(errs, validateImmutable(m.Spec.Address, old.Spec.Address, spec.Child("address"),
			decided+" at this address; delete the TalosMachine and create a new one for another address")...)
		errs = append(errs, validateImmutable(m.Spec.ExpectedFingerprint, old.Spec.ExpectedFingerprint, spec.Child("expectedFingerprint"),
			decided+" with this certificate")...)
	}
	return errs
}

func validateTalosMachineSpec(s *ichor.TalosMachineSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.ClusterName != "" {
		errs = append(errs, validateObjectName(s.ClusterName, fldPath.Child("clusterName"))...)
		errs = append(errs, validateEnum(s.Role, fldPath.Child("role"), ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)...)
	} else {
		errs = append(errs, validateOptionalEnum(s.Role, fldPath.Child("role"), ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)...)
	}
	errs = append(errs, validateHostPort(s.Address, fldPath.Child("address"))...)
	if s.Hostname != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.Hostname) {
			errs = append(errs, field.Invalid(fldPath.Child("hostname"), s.Hostname, msg))
		}
	}
	if s.ExpectedFingerprint != "" {
		errs = append(errs, validateSPKIFingerprint(s.ExpectedFingerprint, fldPath.Child("expectedFingerprint"))...)
	}
	if d := s.Install.Disk; d != "" && (!strings.HasPrefix(d, "/dev/") || len(d) == len("/dev/")) {
		errs = append(errs, field.Invalid(fldPath.Child("install", "disk"), d, "must be a device path such as /dev/sda"))
	}
	errs = append(errs, validateSchematic(s.Schematic, fldPath.Child("schematic"))...)
	return errs
}

// ValidateTalosMachineStatusUpdate checks a status written through /status.
func ValidateTalosMachineStatusUpdate(m, old *ichor.TalosMachine) field.ErrorList {
	errs := validateMetaUpdate(&m.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	s := &m.Status
	errs = append(errs, validateOptionalEnum(s.Phase, status.Child("phase"),
		ichor.MachinePhaseDiscovered, ichor.MachinePhasePendingApproval, ichor.MachinePhaseApproved, ichor.MachinePhaseRejected,
		ichor.MachinePhaseConfiguring, ichor.MachinePhaseReady, ichor.MachinePhaseResetting, ichor.MachinePhaseUnreachable)...)
	errs = append(errs, validateConditions(s.Conditions, status.Child("conditions"))...)
	if mt := s.Maintenance; mt != nil {
		errs = append(errs, validateSPKIFingerprint(mt.CertificateFingerprint, status.Child("maintenance", "certificateFingerprint"))...)
	}
	if hw := s.Hardware; hw != nil {
		errs = append(errs, validateHardware(hw, status.Child("hardware"))...)
	}
	if s.TalosVersion != "" {
		errs = append(errs, validateVersion(s.TalosVersion, status.Child("talosVersion"))...)
	}
	if k := s.Kubernetes; k != nil {
		p := status.Child("kubernetes")
		for _, v := range []struct {
			name, version string
		}{{"apiServer", k.APIServer}, {"controllerManager", k.ControllerManager}, {"scheduler", k.Scheduler}, {"proxy", k.Proxy}, {"kubelet", k.Kubelet}} {
			if v.version != "" {
				errs = append(errs, validateVersion(v.version, p.Child(v.name))...)
			}
		}
	}
	if a := s.Approval; a != nil {
		p := status.Child("approval")
		errs = append(errs, validateEnum(a.Decision, p.Child("decision"), ichor.ApprovalApproved, ichor.ApprovalRejected)...)
		if a.By == "" {
			errs = append(errs, field.Required(p.Child("by"), "the user who decided"))
		}
	}
	if ac := s.AppliedConfig; ac != nil {
		p := status.Child("appliedConfig")
		errs = append(errs, validateSHA256Hex(ac.Hash, p.Child("hash"))...)
		errs = append(errs, validateOptionalEnum(ac.Effect, p.Child("effect"), configEffects...)...)
	}
	if k := s.KubeletServingCertificate; k != nil {
		errs = append(errs, validateRequiredName(k.Request, status.Child("kubeletServingCertificate", "request"))...)
	}
	return errs
}

var configEffects = []ichor.ConfigEffect{ichor.ConfigEffectNone, ichor.ConfigEffectNoReboot, ichor.ConfigEffectReboot, ichor.ConfigEffectAPIServerRestart}

func validateHardware(hw *ichor.HardwareStatus, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	paths := sets.New[string]()
	for i, d := range hw.Disks {
		p := fldPath.Child("disks").Index(i)
		if d.Path == "" {
			errs = append(errs, field.Required(p.Child("path"), ""))
		} else if paths.Has(d.Path) {
			errs = append(errs, field.Duplicate(p.Child("path"), d.Path))
		}
		paths.Insert(d.Path)
		if d.SizeBytes < 0 {
			errs = append(errs, field.Invalid(p.Child("sizeBytes"), d.SizeBytes, "must not be negative"))
		}
	}
	for i, a := range hw.Addresses {
		if _, err := netip.ParsePrefix(a); err != nil && net.ParseIP(a) == nil {
			errs = append(errs, field.Invalid(fldPath.Child("addresses").Index(i), a, "must be an IP address or an address in CIDR notation"))
		}
	}
	return errs
}

// validateSPKIFingerprint checks a certificate fingerprint as talosctl writes
// it: the SHA-256 of the SubjectPublicKeyInfo in standard base64.
func validateSPKIFingerprint(v string, fldPath *field.Path) field.ErrorList {
	const want = "a SHA-256 SPKI fingerprint in standard base64 (44 characters), as talosctl --cert-fingerprint takes"
	if v == "" {
		return field.ErrorList{field.Required(fldPath, want)}
	}
	if b, err := base64.StdEncoding.Strict().DecodeString(v); err != nil || len(b) != sha256.Size {
		return field.ErrorList{field.Invalid(fldPath, v, "must be "+want)}
	}
	return nil
}

// validateSHA256Hex checks a SHA-256 digest written as 64 lower-case hex digits.
func validateSHA256Hex(v string, fldPath *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(fldPath, "a SHA-256 digest as 64 lower-case hex digits")}
	}
	if b, err := hex.DecodeString(v); err != nil || len(b) != 32 || strings.ToLower(v) != v {
		return field.ErrorList{field.Invalid(fldPath, v, "must be a SHA-256 digest as 64 lower-case hex digits")}
	}
	return nil
}

// maxApprovalReasonLength bounds the reason recorded with an approval decision.
const maxApprovalReasonLength = 1024

// ValidateTalosMachineApproval checks a decision written through
// talosmachines/NAME/approval. A decision is taken once, about a machine whose
// maintenance certificate is pinned (so that it is that machine that gets
// configured), and an approval also needs the cluster and role it joins.
func ValidateTalosMachineApproval(m, old *ichor.TalosMachine) field.ErrorList {
	errs := validateMetaUpdate(&m.ObjectMeta, &old.ObjectMeta)
	p := field.NewPath("status", "approval")
	a := m.Status.Approval
	if a == nil {
		return append(errs, field.Required(p, "an approval decision (Approved or Rejected)"))
	}
	errs = append(errs, validateEnum(a.Decision, p.Child("decision"), ichor.ApprovalApproved, ichor.ApprovalRejected)...)
	if len(a.Reason) > maxApprovalReasonLength {
		errs = append(errs, field.TooLong(p.Child("reason"), "", maxApprovalReasonLength))
	}
	if a.Decision == ichor.ApprovalRejected && strings.TrimSpace(a.Reason) == "" {
		errs = append(errs, field.Required(p.Child("reason"), "say why the machine is rejected; the reason is recorded"))
	}
	if prev := old.Status.Approval; prev != nil && prev.Decision != a.Decision {
		errs = append(errs, field.Forbidden(p.Child("decision"), "the machine was already "+strings.ToLower(string(prev.Decision))+
			" by "+prev.By+"; a decision is final (delete the TalosMachine to start over)"))
	}
	if mt := old.Status.Maintenance; mt == nil || mt.CertificateFingerprint == "" {
		errs = append(errs, field.Forbidden(p, "the machine's maintenance certificate is not pinned yet: wait until Ichor has contacted it"))
	}
	if a.Decision == ichor.ApprovalApproved {
		if m.Spec.ClusterName == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "clusterName"), "assign the machine to a cluster before approving it"))
		}
		if m.Spec.Role == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "role"), "assign the machine a role before approving it"))
		}
	}
	return errs
}
