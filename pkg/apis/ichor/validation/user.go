package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

const maxDisplayNameLength = 256

// ValidateIchorUser checks an IchorUser on create.
func ValidateIchorUser(u *ichor.IchorUser) field.ErrorList {
	errs := validateClusterMeta(&u.ObjectMeta)
	return append(errs, validateIchorUserSpec(&u.Spec, field.NewPath("spec"))...)
}

// ValidateIchorUserUpdate checks an IchorUser on update.
func ValidateIchorUserUpdate(u, old *ichor.IchorUser) field.ErrorList {
	errs := validateMetaUpdate(&u.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateIchorUserSpec(&u.Spec, field.NewPath("spec"))...)
}

// ValidateIchorUserStatusUpdate checks a status written through /status.
func ValidateIchorUserStatusUpdate(u, old *ichor.IchorUser) field.ErrorList {
	errs := validateMetaUpdate(&u.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateConditions(u.Status.Conditions, field.NewPath("status", "conditions"))...)
}

func validateIchorUserSpec(s *ichor.IchorUserSpec, fldPath *field.Path) field.ErrorList {
	errs := validateEnum(s.Role, fldPath.Child("role"), ichor.UserRoleViewer, ichor.UserRoleOperator, ichor.UserRoleAdmin)
	if len(s.DisplayName) > maxDisplayNameLength {
		errs = append(errs, field.TooLong(fldPath.Child("displayName"), "", maxDisplayNameLength))
	}
	return errs
}
