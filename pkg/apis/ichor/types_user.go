package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUser is a user Ichor manages itself, for installations without an
// identity provider. Its password is set through a subresource and stored only
// as a hash that no read returns.
type IchorUser struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   IchorUserSpec
	Status IchorUserStatus
}

// UserRole is an Ichor role; each includes the rights of the ones before it.
type UserRole string

const (
	UserRoleViewer   UserRole = "viewer"
	UserRoleOperator UserRole = "operator"
	UserRoleAdmin    UserRole = "admin"
)

// IchorUserSpec is the user's role and state.
type IchorUserSpec struct {
	// role of the user: viewer, operator or admin.
	Role UserRole
	// displayName is shown in the UI.
	DisplayName string
	// disabled users cannot sign in.
	Disabled bool
}

// IchorUserStatus is what the server records about the user.
type IchorUserStatus struct {
	// passwordSet is true once a password has been set.
	PasswordSet bool
	// passwordChangedAt is when the password last changed.
	PasswordChangedAt *metav1.Time
	// lastLoginAt is when the user last signed in.
	LastLoginAt *metav1.Time
	// conditions of the user.
	Conditions []metav1.Condition
	// PasswordHash is the argon2id hash of the password; no response carries it.
	PasswordHash string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserList is a list of IchorUser objects.
type IchorUserList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []IchorUser
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserPassword is the request body of the password subresource.
type IchorUserPassword struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Password is the new password.
	Password string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserLogin is the request body of the login subresource.
type IchorUserLogin struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Password is the password to check.
	Password string
}
