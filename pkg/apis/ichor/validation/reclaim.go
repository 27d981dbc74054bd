package validation

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// ValidateMachineReclaim checks a MachineReclaim on create.
func ValidateMachineReclaim(r *ichor.MachineReclaim) field.ErrorList {
	errs := validateNamespacedMeta(&r.ObjectMeta)
	spec := field.NewPath("spec")
	s := &r.Spec
	switch {
	case s.MachineRef == nil && s.Unmanaged == nil:
		errs = append(errs, field.Required(spec, "set one of machineRef and unmanaged"))
	case s.MachineRef != nil && s.Unmanaged != nil:
		errs = append(errs, field.Forbidden(spec.Child("unmanaged"), "set only one of machineRef and unmanaged"))
	}
	if ref := s.MachineRef; ref != nil {
		p := spec.Child("machineRef")
		if ref.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(ref.Namespace) {
				errs = append(errs, field.Invalid(p.Child("namespace"), ref.Namespace, msg))
			}
		}
		errs = append(errs, validateRequiredName(ref.Name, p.Child("name"))...)
	}
	if u := s.Unmanaged; u != nil {
		p := spec.Child("unmanaged")
		errs = append(errs, validateHostPort(u.Address, p.Child("address"))...)
		errs = append(errs, validateSecretKey(u.TalosconfigSecretRef.Name, u.TalosconfigSecretRef.Key, p.Child("talosconfigSecretRef"))...)
	}
	errs = append(errs, validateRequiredName(s.ClusterName, spec.Child("clusterName"))...)
	errs = append(errs, validateEnum(s.Role, spec.Child("role"), ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)...)
	if s.ExpectedFingerprint != "" {
		errs = append(errs, validateSPKIFingerprint(s.ExpectedFingerprint, spec.Child("expectedFingerprint"))...)
	}
	if s.MachineRef != nil && s.Unmanaged == nil {
		const how = "a managed machine is reset as deleting its TalosMachine resets it (gracefully, wiping Talos's STATE and EPHEMERAL partitions)"
		if s.Wipe != "" {
			errs = append(errs, field.Forbidden(spec.Child("wipe"), how))
		}
		if s.Graceful != nil {
			errs = append(errs, field.Forbidden(spec.Child("graceful"), how))
		}
	}
	if s.Unmanaged != nil {
		if s.Wipe == ichor.WipeModeUserDisks {
			errs = append(errs, field.Invalid(spec.Child("wipe"), s.Wipe,
				"user-disks keeps Talos's state, so the node would stay in its cluster; use all or system-disk"))
		} else {
			errs = append(errs, validateEnum(s.Wipe, spec.Child("wipe"), ichor.WipeModeAll, ichor.WipeModeSystemDisk)...)
		}
	}
	return errs
}

// ValidateMachineReclaimUpdate checks an update: what was asked does not change.
func ValidateMachineReclaimUpdate(r, old *ichor.MachineReclaim) field.ErrorList {
	errs := validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateImmutableSpec(r.Spec, old.Spec, field.NewPath("spec"), "create a new MachineReclaim instead")...)
}

// ValidateMachineReclaimStatusUpdate checks a status written through /status.
func ValidateMachineReclaimStatusUpdate(r, old *ichor.MachineReclaim) field.ErrorList {
	errs := validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	errs = append(errs, validateOptionalEnum(r.Status.Phase, status.Child("phase"),
		ichor.ReclaimPending, ichor.ReclaimResetting, ichor.ReclaimJoining, ichor.ReclaimSucceeded, ichor.ReclaimFailed)...)
	return append(errs, validateConditions(r.Status.Conditions, status.Child("conditions"))...)
}
