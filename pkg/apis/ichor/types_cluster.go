package ichor

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCluster is a desired Talos Linux cluster: its versions, endpoint,
// network and the Secret holding its secrets bundle.
type TalosCluster struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosClusterSpec
	Status TalosClusterStatus
}

// TalosClusterSpec is the desired state of a Talos cluster.
type TalosClusterSpec struct {
	// talosVersion is the Talos release the cluster runs, as a semantic version with a leading v (v1.13.0).
	TalosVersion string
	// kubernetesVersion is the Kubernetes release, as a semantic version with a leading v (v1.37.2).
	KubernetesVersion string
	// controlPlane describes how the Kubernetes API of the cluster is reached.
	ControlPlane ControlPlaneSpec
	// network holds the cluster's pod and service networks and its CNI.
	Network ClusterNetwork
	// ciliumValues are Helm values for Cilium as YAML, used when network.cni.name is cilium.
	CiliumValues string
	// secretsRef names the Secret holding the cluster's secrets bundle. When empty the
	// controller generates the bundle into a Secret named <cluster>-secrets.
	SecretsRef *LocalSecretReference
	// authentication is the OIDC issuer the cluster's kube-apiserver trusts.
	Authentication *ClusterAuthentication
	// security holds opt-in hardening options.
	Security ClusterSecurity
	// paused stops the controller from changing any machine of this cluster.
	Paused bool
	// backup schedules encrypted backups of the cluster's etcd and machine configs.
	Backup *ClusterBackup
	// schematic is the Image Factory schematic of the cluster's Talos image.
	Schematic *Schematic
}

// ControlPlaneSpec describes the cluster's control-plane endpoint.
type ControlPlaneSpec struct {
	// endpoint is the https URL of the cluster's Kubernetes API (https://10.5.0.2:6443).
	Endpoint string
}

// ClusterNetwork holds the cluster's networks.
type ClusterNetwork struct {
	// podCIDRs are the networks pod addresses come from.
	PodCIDRs []string
	// serviceCIDRs are the networks service addresses come from.
	ServiceCIDRs []string
	// dnsDomain is the cluster's DNS domain.
	DNSDomain string
	// cni selects the cluster's network plugin.
	CNI CNISpec
}

// CNIName names a network plugin Ichor can install.
type CNIName string

const (
	// CNIFlannel is Talos's default network plugin.
	CNIFlannel CNIName = "flannel"
	// CNICilium is installed with the cluster's ciliumValues.
	CNICilium CNIName = "cilium"
	// CNINone installs no network plugin; the user brings one.
	CNINone CNIName = "none"
)

// CNISpec selects the network plugin.
type CNISpec struct {
	// name of the plugin: flannel, cilium or none.
	Name CNIName
}

// ClusterAuthentication is the OIDC trust of the cluster's kube-apiserver.
type ClusterAuthentication struct {
	// issuerURL is the https URL of the OIDC issuer.
	IssuerURL string
	// clientID is the audience tokens must carry.
	ClientID string
	// usernameClaim is the claim used as the user name.
	UsernameClaim string
	// groupsClaim is the claim used as the user's groups.
	GroupsClaim string
	// caBundle is the PEM certificates that issue the issuer's certificate,
	// when public roots do not.
	CABundle string
}

// ClusterSecurity holds opt-in hardening options.
type ClusterSecurity struct {
	// kubeletServingCertificates makes kubelets request serving certificates that Ichor approves.
	KubeletServingCertificates KubeletServingCertificates
	// diskEncryption encrypts every machine's system volumes when it is installed.
	DiskEncryption *DiskEncryption
	// secureBoot is what a machine's boot must be before the cluster's config is installed on it.
	SecureBoot SecureBootRequirement
}

// SecureBootRequirement is what Ichor requires of how a machine booted.
type SecureBootRequirement struct {
	// required installs the cluster's config only on a machine that booted with SecureBoot.
	Required bool
	// installerImage is the repository of the cluster's SecureBoot installer, without a tag.
	InstallerImage string
}

// DiskEncryption encrypts the system volumes STATE and EPHEMERAL with LUKS2.
type DiskEncryption struct {
	// Key protects the volumes: tpm or nodeID.
	Key DiskEncryptionKey
}

// DiskEncryptionKey is what protects an encrypted volume's key.
type DiskEncryptionKey string

const (
	DiskEncryptionKeyTPM    DiskEncryptionKey = "tpm"
	DiskEncryptionKeyNodeID DiskEncryptionKey = "nodeID"
)

// KubeletServingCertificates configures kubelet serving certificates.
type KubeletServingCertificates struct {
	// enabled turns on serverTLSBootstrap on every kubelet and Ichor's approver.
	Enabled bool
	// verifyFromAPIServer makes kube-apiserver verify kubelet serving certificates
	// once every machine holds one.
	VerifyFromAPIServer bool
}

// ClusterPhase summarises a cluster's state for people reading a table.
type ClusterPhase string

const (
	ClusterPhasePending      ClusterPhase = "Pending"
	ClusterPhaseProvisioning ClusterPhase = "Provisioning"
	ClusterPhaseReady        ClusterPhase = "Ready"
	ClusterPhaseDegraded     ClusterPhase = "Degraded"
	ClusterPhaseDeleting     ClusterPhase = "Deleting"
)

// TalosClusterStatus is the observed state of a Talos cluster, written by the controller.
type TalosClusterStatus struct {
	// phase summarises the conditions.
	Phase ClusterPhase
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// conditions: SecretsReady, MachinesReady, Bootstrapped, KubernetesAPIReady and others.
	Conditions []metav1.Condition
	// Override is a granted safety-check override, cleared when used.
	Override *OverrideStatus
	// machines counts the cluster's machines.
	Machines MachineCounts
	// talosVersion is the lowest Talos version running on the cluster's machines.
	TalosVersion string
	// kubernetesVersion is the lowest Kubernetes version the cluster runs:
	// of its control-plane static pods, kube-proxy and kubelets, or the
	// answering API server's when none of them tells.
	KubernetesVersion string
	// bootstrappedAt is when etcd was bootstrapped on the first control plane.
	BootstrappedAt *metav1.Time
	// disruption is the cluster's disruption budget while a machine holds it.
	Disruption *DisruptionStatus
	// backup is what the backup schedule did last.
	Backup *ClusterBackupStatus
	// kubernetesCA is the PEM certificate of the cluster's Kubernetes CA.
	KubernetesCA string
	CARotation   *CARotationStatus
	Credentials  *ClusterCredentialsStatus
	// diskKeyRotation is the disk-encryption key rotation under way.
	DiskKeyRotation *DiskKeyRotationStatus
	// diskKeySlot is the LUKS2 key slot of the disk-encryption key.
	DiskKeySlot int32
	// secretsDigest is the SHA-256 of the bundle the controller generated.
	SecretsDigest string
	// image says where the cluster's Talos image comes from.
	Image *ImageStatus
	// kubernetesKeyRotation is the rotation of the service-account signing
	// key or the secrets-encryption key under way.
	KubernetesKeyRotation *KubernetesKeyRotationStatus
	// secretsEncryptionKeyName is the name kube-apiserver knows the
	// bundle's secretbox key by; empty: Talos's own, key2.
	SecretsEncryptionKeyName string
}

// KubernetesKeyRotationStatus is a rotation of Kubernetes keys under way
// on a cluster; see v1alpha1.
type KubernetesKeyRotationStatus struct {
	Operation         string
	Phase             CARotationPhase
	Since             *metav1.Time
	ServiceAccount    bool
	SecretsEncryption bool
	SecretDigest      string
}

// DiskKeyRotationPhase is how far a disk-encryption key rotation has moved
// the cluster's machine configs; see v1alpha1.
type DiskKeyRotationPhase string

const (
	DiskKeyRotationAddNew  DiskKeyRotationPhase = "AddNew"
	DiskKeyRotationDropOld DiskKeyRotationPhase = "DropOld"
)

// DiskKeyRotationStatus is a disk-encryption key rotation under way on a
// cluster.
type DiskKeyRotationStatus struct {
	Operation string
	Phase     DiskKeyRotationPhase
	Slot      int32
	Since     *metav1.Time
}

// ClusterCredentialsStatus is who took the new admin credentials of a
// cluster's last completed CA rotation, and when.
type ClusterCredentialsStatus struct {
	Rotation  string
	RotatedAt metav1.Time
	ServedTo  string
	ServedAt  *metav1.Time
	Request   string
}

// CARotationPhase is how far a Talos API CA rotation has moved the
// cluster's machine configs; see v1alpha1.
type CARotationPhase string

const (
	CARotationAcceptNew CARotationPhase = "AcceptNew"
	CARotationIssueNew  CARotationPhase = "IssueNew"
	CARotationDropOld   CARotationPhase = "DropOld"
)

// CARotationStatus is a CA rotation under way on a cluster.
type CARotationStatus struct {
	Operation  string
	Phase      CARotationPhase
	Since      *metav1.Time
	Talos      bool
	Kubernetes bool
	// SecretDigest is the SHA-256 of the new CAs the controller generated.
	SecretDigest string
}

// DisruptionAction is what takes a node, or an etcd member, away.
type DisruptionAction string

const (
	// DisruptionReboot: the node reboots into a new config.
	DisruptionReboot DisruptionAction = "Reboot"
	// DisruptionAPIServerRestart: a control plane's kube-apiserver restarts.
	DisruptionAPIServerRestart DisruptionAction = "APIServerRestart"
	// DisruptionReset: the node is reset (a control plane leaves etcd).
	DisruptionReset DisruptionAction = "Reset"
	// DisruptionEtcdDefrag: a control plane's etcd member defragments its
	// database, and answers nothing else meanwhile.
	DisruptionEtcdDefrag DisruptionAction = "EtcdDefrag"
	// DisruptionShutdown: the node powers off, and stays off until someone
	// powers it on.
	DisruptionShutdown DisruptionAction = "Shutdown"
)

// DisruptionStatus is the cluster's disruption budget, held by the one
// machine that may be away: every action that takes a node or an etcd member
// away holds it, and releases it when the node is back or the action failed.
type DisruptionStatus struct {
	// machine holds the budget.
	Machine string
	// machineUID is that machine's UID: a budget whose machine is gone is free.
	MachineUID types.UID
	// action the machine is taken away for.
	Action DisruptionAction
	// since when it holds the budget.
	Since metav1.Time
	// operation is the TalosOperation whose step holds the budget; empty
	// when the machine's own config rollout or deletion holds it.
	Operation string
	// batch are more workers an operation's step takes away together with
	// machine, up to the operation's spec.maxUnavailable.
	Batch []DisruptionMember
}

// DisruptionMember is one more machine away under the budget.
type DisruptionMember struct {
	Machine    string
	MachineUID types.UID
}

// MachineCounts counts a cluster's machines.
type MachineCounts struct {
	// total machines in the cluster.
	Total int32
	// ready machines.
	Ready int32
	// controlPlanes in the cluster.
	ControlPlanes int32
	// workers in the cluster.
	Workers int32
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosClusterList is a list of TalosCluster objects.
type TalosClusterList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosCluster
}
