package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +genclient:method=UpdatePassword,verb=update,subresource=password,input=IchorUserPassword,result=IchorUser
// +genclient:method=Login,verb=create,subresource=login,input=IchorUserLogin,result=IchorUser
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUser is a user Ichor manages itself, for installations without an
// identity provider. Its password is set through a subresource and stored only
// as a hash that no read returns.
type IchorUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   IchorUserSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status IchorUserStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
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
	Role UserRole `json:"role" protobuf:"bytes,1,opt,name=role,casttype=UserRole"`
	// displayName is shown in the UI.
	// +optional
	DisplayName string `json:"displayName,omitempty" protobuf:"bytes,2,opt,name=displayName"`
	// disabled users cannot sign in.
	// +optional
	Disabled bool `json:"disabled,omitempty" protobuf:"varint,3,opt,name=disabled"`
}

// IchorUserStatus is what the server records about the user.
type IchorUserStatus struct {
	// passwordSet is true once a password has been set.
	// +optional
	PasswordSet bool `json:"passwordSet,omitempty" protobuf:"varint,1,opt,name=passwordSet"`
	// passwordChangedAt is when the password last changed.
	// +optional
	PasswordChangedAt *metav1.Time `json:"passwordChangedAt,omitempty" protobuf:"bytes,2,opt,name=passwordChangedAt"`
	// lastLoginAt is when the user last signed in.
	// +optional
	LastLoginAt *metav1.Time `json:"lastLoginAt,omitempty" protobuf:"bytes,3,opt,name=lastLoginAt"`
	// passwordHash is where the server keeps the argon2id hash of the
	// password. The server removes it from every response, so it always
	// reads empty, and ignores it in every write but the password one.
	// +optional
	PasswordHash string `json:"passwordHash,omitempty" protobuf:"bytes,4,opt,name=passwordHash"`
	// conditions of the user.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,5,rep,name=conditions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserList is a list of IchorUser objects.
type IchorUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []IchorUser `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserPassword is the request body of ichorusers/NAME/password, which
// sets the user's password. The server keeps only a slow hash of it.
type IchorUserPassword struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name, when set, must be the user's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// password is the new password: at least 12 characters, at most 1024 bytes.
	Password string `json:"password" protobuf:"bytes,2,opt,name=password"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IchorUserLogin is the request body of ichorusers/NAME/login, which checks
// the user's password and records the sign-in (status.lastLoginAt). Only
// Ichor's token issuer (ichor-auth) holds the verb to send it: it signs a
// token for the user when the password matches and the user is enabled.
// A password that does not match is refused as Invalid, a disabled user's
// sign-in as Forbidden; neither writes anything.
type IchorUserLogin struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name, when set, must be the user's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// password to check. The server neither stores nor logs it.
	Password string `json:"password" protobuf:"bytes,2,opt,name=password"`
}

// CauseTypeUserDisabled is the cause of ichorusers/NAME/login's Forbidden
// answer for a disabled user whose password matched.
const CauseTypeUserDisabled metav1.CauseType = "UserDisabled"
