package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCredentialRequest asks for a short-lived Talos client certificate for a
// public key the requester keeps the private half of. The controller signs it
// for the least Talos role the purpose needs and deletes the request soon after.
type TalosCredentialRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosCredentialRequestSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosCredentialRequestStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// CredentialPurpose says what a Talos credential is for; it decides the role.
// +enum
type CredentialPurpose string

const (
	PurposeTalosconfigReader CredentialPurpose = "talosconfig-reader"
	PurposeSupportBundle     CredentialPurpose = "support-bundle"
	PurposeEtcdSnapshot      CredentialPurpose = "etcd-snapshot"
	PurposePacketCapture     CredentialPurpose = "packet-capture"
	PurposeCredentials       CredentialPurpose = "credentials"
)

// TalosCredentialRequestSpec is the request. username, uid and groups are
// set by the server from the authenticated caller; values sent are ignored.
type TalosCredentialRequestSpec struct {
	// clusterName is the TalosCluster in this namespace the credential is for.
	ClusterName string `json:"clusterName" protobuf:"bytes,1,opt,name=clusterName"`
	// machines the credential will be used against; empty means the whole cluster.
	// +optional
	// +listType=set
	Machines []string `json:"machines,omitempty" protobuf:"bytes,2,rep,name=machines"`
	// purpose of the credential.
	Purpose CredentialPurpose `json:"purpose" protobuf:"bytes,3,opt,name=purpose,casttype=CredentialPurpose"`
	// publicKey is the PEM-encoded PKIX public key to certify (Ed25519, ECDSA or RSA).
	PublicKey string `json:"publicKey" protobuf:"bytes,4,opt,name=publicKey"`
	// username of the requester, set by the server.
	// +optional
	Username string `json:"username,omitempty" protobuf:"bytes,5,opt,name=username"`
	// uid of the requester, set by the server.
	// +optional
	UID string `json:"uid,omitempty" protobuf:"bytes,6,opt,name=uid"`
	// groups of the requester, set by the server.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty" protobuf:"bytes,7,rep,name=groups"`
}

// TalosCredentialRequestStatus carries the answer.
type TalosCredentialRequestStatus struct {
	// role is the Talos role the certificate carries.
	// +optional
	Role string `json:"role,omitempty" protobuf:"bytes,1,opt,name=role"`
	// certificate is the PEM-encoded client certificate.
	// +optional
	Certificate string `json:"certificate,omitempty" protobuf:"bytes,2,opt,name=certificate"`
	// caBundle is the PEM-encoded Talos CA that serves the nodes.
	// +optional
	CABundle string `json:"caBundle,omitempty" protobuf:"bytes,3,opt,name=caBundle"`
	// expirationTimestamp is when the certificate stops being valid.
	// +optional
	ExpirationTimestamp *metav1.Time `json:"expirationTimestamp,omitempty" protobuf:"bytes,4,opt,name=expirationTimestamp"`
	// conditions: Issued or Denied, with a reason.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,5,rep,name=conditions"`
	// kubernetesCertificate is, for the credentials purpose, the PEM client
	// certificate of the same key for the cluster's Kubernetes API, in the
	// system:masters group, valid as long as certificate.
	// +optional
	KubernetesCertificate string `json:"kubernetesCertificate,omitempty" protobuf:"bytes,6,opt,name=kubernetesCertificate"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCredentialRequestList is a list of TalosCredentialRequest objects.
type TalosCredentialRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosCredentialRequest `json:"items" protobuf:"bytes,2,rep,name=items"`
}
