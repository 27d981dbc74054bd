package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCredentialRequest asks for a short-lived Talos client certificate for a
// public key the requester keeps the private half of. The controller signs it
// for the least Talos role the purpose needs and deletes the request soon after.
type TalosCredentialRequest struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosCredentialRequestSpec
	Status TalosCredentialRequestStatus
}

// CredentialPurpose says what a Talos credential is for; it decides the role.
type CredentialPurpose string

const (
	PurposeTalosconfigReader CredentialPurpose = "talosconfig-reader"
	PurposeSupportBundle     CredentialPurpose = "support-bundle"
	PurposeEtcdSnapshot      CredentialPurpose = "etcd-snapshot"
	PurposePacketCapture     CredentialPurpose = "packet-capture"
)

// TalosCredentialRequestSpec is the request. username, uid and groups are
// set by the server from the authenticated caller; values sent are ignored.
type TalosCredentialRequestSpec struct {
	// clusterName is the TalosCluster in this namespace the credential is for.
	ClusterName string
	// machines the credential will be used against; empty means the whole cluster.
	Machines []string
	// purpose of the credential.
	Purpose CredentialPurpose
	// publicKey is the PEM-encoded PKIX public key to certify (Ed25519, ECDSA or RSA).
	PublicKey string
	// username of the requester, set by the server.
	Username string
	// uid of the requester, set by the server.
	UID string
	// groups of the requester, set by the server.
	Groups []string
}

// TalosCredentialRequestStatus carries the answer.
type TalosCredentialRequestStatus struct {
	// role is the Talos role the certificate carries.
	Role string
	// certificate is the PEM-encoded client certificate.
	Certificate string
	// caBundle is the PEM-encoded Talos CA that serves the nodes.
	CABundle string
	// expirationTimestamp is when the certificate stops being valid.
	ExpirationTimestamp *metav1.Time
	// conditions: Issued or Denied, with a reason.
	Conditions []metav1.Condition
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCredentialRequestList is a list of TalosCredentialRequest objects.
type TalosCredentialRequestList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosCredentialRequest
}
