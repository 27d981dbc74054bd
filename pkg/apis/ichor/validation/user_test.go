package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validUser is an internal, cluster-scoped IchorUser (the kind has no defaults).
func validUser() *ichor.IchorUser {
	return &ichor.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Name: "alice", ResourceVersion: "1"},
		Spec:       ichor.IchorUserSpec{Role: ichor.UserRoleOperator, DisplayName: "Alice Liddell"},
	}
}

func TestValidateIchorUser(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(u *ichor.IchorUser)
		want   []fe
	}{
		{name: "valid", mutate: func(u *ichor.IchorUser) {}},
		{
			name: "valid disabled admin with the longest display name",
			mutate: func(u *ichor.IchorUser) {
				u.Spec = ichor.IchorUserSpec{Role: ichor.UserRoleAdmin, DisplayName: strings.Repeat("é", maxDisplayNameLength/2), Disabled: true}
			},
		},
		{
			name:   "valid viewer without display name",
			mutate: func(u *ichor.IchorUser) { u.Spec = ichor.IchorUserSpec{Role: ichor.UserRoleViewer} },
		},
		{
			name:   "namespaced",
			mutate: func(u *ichor.IchorUser) { u.Namespace = "team-a" },
			want:   []fe{forbidden("metadata.namespace")},
		},
		{
			name:   "bad name",
			mutate: func(u *ichor.IchorUser) { u.Name = "Alice@Example" },
			want:   []fe{invalid("metadata.name")},
		},
		{
			name:   "role missing",
			mutate: func(u *ichor.IchorUser) { u.Spec.Role = "" },
			want:   []fe{required("spec.role")},
		},
		{
			name:   "unknown role",
			mutate: func(u *ichor.IchorUser) { u.Spec.Role = "root" },
			want:   []fe{notSupported("spec.role")},
		},
		{
			name:   "display name too long",
			mutate: func(u *ichor.IchorUser) { u.Spec.DisplayName = strings.Repeat("a", maxDisplayNameLength+1) },
			want:   []fe{tooLong("spec.displayName")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := validUser()
			tc.mutate(u)
			expectErrors(t, ValidateIchorUser(u), tc.want...)
		})
	}
}

func TestValidateIchorUserUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(u *ichor.IchorUser)
		want   []fe
	}{
		{name: "unchanged", mutate: func(u *ichor.IchorUser) {}},
		{
			name:   "promote and disable",
			mutate: func(u *ichor.IchorUser) { u.Spec.Role = ichor.UserRoleAdmin; u.Spec.Disabled = true },
		},
		{
			name:   "unknown role",
			mutate: func(u *ichor.IchorUser) { u.Spec.Role = "superuser" },
			want:   []fe{notSupported("spec.role")},
		},
		{
			name:   "rename",
			mutate: func(u *ichor.IchorUser) { u.Name = "bob" },
			want:   []fe{invalid("metadata.name")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validUser()
			u := old.DeepCopy()
			tc.mutate(u)
			expectErrors(t, ValidateIchorUserUpdate(u, old), tc.want...)
		})
	}
}

func TestValidateIchorUserStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.IchorUserStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.IchorUserStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.IchorUserStatus) {
				s.PasswordSet = true
				s.PasswordChangedAt = &fixedTime
				s.LastLoginAt = &fixedTime
				s.Conditions = []metav1.Condition{goodCondition("PasswordSet")}
			},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.IchorUserStatus)
			want   []fe
		}{bc.name, func(s *ichor.IchorUserStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validUser()
			u := old.DeepCopy()
			tc.mutate(&u.Status)
			expectErrors(t, ValidateIchorUserStatusUpdate(u, old), tc.want...)
		})
	}
}
