// Package ichoruser stores IchorUsers.
package ichoruser

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes IchorUsers to the generic storage.
var Definition = &resource.Definition[*ichor.IchorUser]{
	Resource:   ichor.Resource("ichorusers"),
	Singular:   "ichoruser",
	ShortNames: []string{"iu"},

	New:     func() *ichor.IchorUser { return &ichor.IchorUser{} },
	NewList: func() runtime.Object { return &ichor.IchorUserList{} },

	// The password is set only through /password, and its hash is never
	// read back; a sign-in is recorded only through /login.
	PrepareForStatusUpdate: func(_ context.Context, u, old *ichor.IchorUser) {
		u.Status.PasswordHash, u.Status.PasswordSet, u.Status.PasswordChangedAt =
			old.Status.PasswordHash, old.Status.PasswordSet, old.Status.PasswordChangedAt
		u.Status.LastLoginAt = old.Status.LastLoginAt
	},
	StatusResetFields: []fieldpath.Path{
		fieldpath.MakePathOrDie("status", "passwordHash"),
		fieldpath.MakePathOrDie("status", "passwordSet"),
		fieldpath.MakePathOrDie("status", "passwordChangedAt"),
		fieldpath.MakePathOrDie("status", "lastLoginAt"),
	},
	Decorate: func(u *ichor.IchorUser) { u.Status.PasswordHash = "" },
	Actions:  []resource.Action[*ichor.IchorUser]{password, login},

	Validate:             validation.ValidateIchorUser,
	ValidateUpdate:       validation.ValidateIchorUserUpdate,
	ValidateStatusUpdate: validation.ValidateIchorUserStatusUpdate,

	SelectableFields: func(u *ichor.IchorUser) fields.Set {
		return fields.Set{"spec.role": string(u.Spec.Role)}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Role", Type: "string", Description: "viewer, operator or admin."},
		{Name: "Display Name", Type: "string", Description: "Name shown in the UI."},
		{Name: "Disabled", Type: "boolean", Description: "Whether the user may sign in."},
		{Name: "Password Set", Type: "boolean", Description: "Whether a password has been set."},
	},
	Cells: func(u *ichor.IchorUser) []any {
		return []any{string(u.Spec.Role), u.Spec.DisplayName, u.Spec.Disabled, u.Status.PasswordSet}
	},
}
