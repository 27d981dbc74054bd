package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +genclient:method=UpdatePassword,verb=update,subresource=password,input=IchorUserPassword,result=IchorUser
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUser is a user Ichor manages itself, for installations without an
// identity provider. Its password is set through a subresource and stored only
// as a hash that no read returns.
type IchorUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IchorUserSpec   `json:"spec"`
	Status IchorUserStatus `json:"status,omitempty"`
}

// UserRole is an Ichor role; each includes the rights of the ones before it.
// +enum
type UserRole string

const (
	UserRoleViewer   UserRole = "viewer"
	UserRoleOperator UserRole = "operator"
	UserRoleAdmin    UserRole = "admin"
)

// IchorUserSpec is the user's role and state.
type IchorUserSpec struct {
	// role of the user: viewer, operator or admin.
	Role UserRole `json:"role"`
	// displayName is shown in the UI.
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// disabled users cannot sign in.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// IchorUserStatus is what the server records about the user.
type IchorUserStatus struct {
	// passwordSet is true once a password has been set.
	// +optional
	PasswordSet bool `json:"passwordSet,omitempty"`
	// passwordChangedAt is when the password last changed.
	// +optional
	PasswordChangedAt *metav1.Time `json:"passwordChangedAt,omitempty"`
	// lastLoginAt is when the user last signed in.
	// +optional
	LastLoginAt *metav1.Time `json:"lastLoginAt,omitempty"`
	// passwordHash is where the server keeps the argon2id hash of the
	// password. The server removes it from every response, so it always
	// reads empty, and ignores it in every write but the password one.
	// +optional
	PasswordHash string `json:"passwordHash,omitempty"`
	// conditions of the user.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserList is a list of IchorUser objects.
type IchorUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IchorUser `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserPassword is the request body of ichorusers/NAME/password, which
// sets the user's password. The server keeps only a slow hash of it.
type IchorUserPassword struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name, when set, must be the user's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// password is the new password: at least 12 characters, at most 1024 bytes.
	Password string `json:"password"`
}
