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
	PurposeCredentials       CredentialPurpose = "credentials"
)

// PurposeRight is an Ichor right, verb on resource/subresource, that the
// requester of a credential must hold.
// +k8s:deepcopy-gen=false
type PurposeRight struct {
	Verb, Resource, Subresource string
	// EveryMachine asks on every machine of the namespace rather than on
	// the machines the request names: a Talos certificate is valid on every
	// node of its cluster.
	EveryMachine bool
}

// PurposeRule is what a credential purpose stands for.
// +k8s:deepcopy-gen=false
type PurposeRule struct {
	// TalosRole is the least Talos role that does it: the certificate's
	// organization.
	TalosRole string
	// Rights are what its requester must hold through Ichor (admission
	// asks them): nobody gets a Talos certificate for more than they could
	// do through Ichor.
	Rights []PurposeRight
}

// CredentialPurposes are every purpose a Talos credential can be requested
// for: one per download of Downloads, whose Talos role it gets (the least
// that does the download: os:reader reads configs and logs and no secret,
// os:etcd:backup the same etcd data on every member), for a requester who
// holds download on it and what else the role allows (a packet capture's
// os:operator also reboots, shuts down and upgrades any node of the
// cluster and snapshots its etcd, so its requester must hold those too:
// admins do).
var CredentialPurposes = func() map[CredentialPurpose]PurposeRule {
	purposes := map[CredentialPurpose]PurposeRule{}
	for _, d := range Downloads {
		rights := append([]PurposeRight{{VerbDownload, d.Resource, d.Subresource, false}}, d.AlsoRequires...)
		purposes[d.Purpose()] = PurposeRule{TalosRole: d.TalosRole, Rights: rights}
	}
	return purposes
}()

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
	// kubernetesCertificate is, for the credentials purpose, the Kubernetes
	// client certificate of the same key.
	KubernetesCertificate string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCredentialRequestList is a list of TalosCredentialRequest objects.
type TalosCredentialRequestList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosCredentialRequest
}
