package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:method=UpdateAuthentication,verb=update,subresource=authentication
// +genclient:method=UpdateSchematic,verb=update,subresource=schematic
// +genclient:method=Override,verb=create,subresource=override,input=Override,result=TalosCluster
// (cilium-values and secret-references have no typed methods: the apply
// configuration generator derives Go names from subresource names and cannot
// spell hyphenated ones; use the REST client's SubResource for them.)
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCluster is a desired Talos Linux cluster: its versions, endpoint,
// network and the Secret holding its secrets bundle.
type TalosCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosClusterSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosClusterStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// TalosClusterSpec is the desired state of a Talos cluster.
type TalosClusterSpec struct {
	// talosVersion is the Talos release the cluster runs, as a semantic version with a leading v (v1.13.0).
	TalosVersion string `json:"talosVersion" protobuf:"bytes,1,opt,name=talosVersion"`
	// kubernetesVersion is the Kubernetes release, as a semantic version with a leading v (v1.37.2).
	KubernetesVersion string `json:"kubernetesVersion" protobuf:"bytes,2,opt,name=kubernetesVersion"`
	// controlPlane describes how the Kubernetes API of the cluster is reached.
	ControlPlane ControlPlaneSpec `json:"controlPlane" protobuf:"bytes,3,opt,name=controlPlane"`
	// network holds the cluster's pod and service networks and its CNI.
	// +optional
	Network ClusterNetwork `json:"network,omitempty" protobuf:"bytes,4,opt,name=network"`
	// ciliumValues are Helm values for Cilium as YAML, used when network.cni.name is cilium.
	// +optional
	CiliumValues string `json:"ciliumValues,omitempty" protobuf:"bytes,5,opt,name=ciliumValues"`
	// secretsRef names the Secret holding the cluster's secrets bundle. When empty the
	// controller generates the bundle into a Secret named <cluster>-secrets.
	// +optional
	SecretsRef *LocalSecretReference `json:"secretsRef,omitempty" protobuf:"bytes,6,opt,name=secretsRef"`
	// authentication is the OIDC issuer the cluster's kube-apiserver trusts.
	// +optional
	Authentication *ClusterAuthentication `json:"authentication,omitempty" protobuf:"bytes,7,opt,name=authentication"`
	// security holds opt-in hardening options.
	// +optional
	Security ClusterSecurity `json:"security,omitempty" protobuf:"bytes,8,opt,name=security"`
	// paused stops the controller from changing any machine of this cluster.
	// +optional
	Paused bool `json:"paused,omitempty" protobuf:"varint,9,opt,name=paused"`
	// backup schedules encrypted backups of the cluster's etcd and machine configs.
	// +optional
	Backup *ClusterBackup `json:"backup,omitempty" protobuf:"bytes,10,opt,name=backup"`
	// schematic is the Image Factory schematic of the cluster's Talos image:
	// the system extensions, kernel arguments and board overlay its machines
	// install with. The installer comes from the installation's image factory
	// (spec.settings.imageFactory of the IchorInstallation), which a
	// schematic needs. A change is a no-reboot config change that takes
	// effect at the next talos-upgrade (one to the version the cluster runs
	// installs it).
	// +optional
	Schematic *Schematic `json:"schematic,omitempty" protobuf:"bytes,11,opt,name=schematic"`
}

// ControlPlaneSpec describes the cluster's control-plane endpoint.
type ControlPlaneSpec struct {
	// endpoint is the https URL of the cluster's Kubernetes API (https://10.5.0.2:6443).
	Endpoint string `json:"endpoint" protobuf:"bytes,1,opt,name=endpoint"`
}

// ClusterNetwork holds the cluster's networks.
type ClusterNetwork struct {
	// podCIDRs are the networks pod addresses come from.
	// +optional
	// +listType=atomic
	PodCIDRs []string `json:"podCIDRs,omitempty" protobuf:"bytes,1,rep,name=podCIDRs"`
	// serviceCIDRs are the networks service addresses come from.
	// +optional
	// +listType=atomic
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty" protobuf:"bytes,2,rep,name=serviceCIDRs"`
	// dnsDomain is the cluster's DNS domain.
	// +optional
	DNSDomain string `json:"dnsDomain,omitempty" protobuf:"bytes,3,opt,name=dnsDomain"`
	// cni selects the cluster's network plugin.
	// +optional
	CNI CNISpec `json:"cni,omitempty" protobuf:"bytes,4,opt,name=cni"`
}

// CNIName names a network plugin Ichor can install.
// +enum
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
	// +optional
	Name CNIName `json:"name,omitempty" protobuf:"bytes,1,opt,name=name,casttype=CNIName"`
}

// ClusterAuthentication is the OIDC trust of the cluster's kube-apiserver:
// people signed in at that issuer reach the cluster as oidc:<username>, in
// groups oidc:<group>. The prefix is fixed, so that no token can name a
// system: user or group. It is rendered into the control planes'
// kube-apiserver flags (--oidc-*) up to the v1.13 contract, and from v1.14
// into a JWT authenticator of KubeAuthenticationConfig, which also refuses
// a token without email_verified: a change that restarts kube-apiserver
// and is rolled out one control plane at a time, without a reboot.
type ClusterAuthentication struct {
	// issuerURL is the https URL of the OIDC issuer; kube-apiserver reads
	// its discovery document and keys from there.
	IssuerURL string `json:"issuerURL" protobuf:"bytes,1,opt,name=issuerURL"`
	// clientID is the audience tokens must carry.
	ClientID string `json:"clientID" protobuf:"bytes,2,opt,name=clientID"`
	// usernameClaim is the claim used as the user name. With email (the
	// default), a token whose email_verified claim is false is refused.
	// +optional
	UsernameClaim string `json:"usernameClaim,omitempty" protobuf:"bytes,3,opt,name=usernameClaim"`
	// groupsClaim is the claim used as the user's groups. Default: groups.
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty" protobuf:"bytes,4,opt,name=groupsClaim"`
	// caBundle is the PEM certificates that issue the issuer's certificate,
	// when the public roots kube-apiserver's image carries do not. They are
	// added to the control planes' trusted roots (a TrustedRootsConfig),
	// which kube-apiserver then reads.
	// +optional
	CABundle string `json:"caBundle,omitempty" protobuf:"bytes,5,opt,name=caBundle"`
}

// ClusterSecurity holds opt-in hardening options.
type ClusterSecurity struct {
	// kubeletServingCertificates makes kubelets request serving certificates that Ichor approves.
	// +optional
	KubeletServingCertificates KubeletServingCertificates `json:"kubeletServingCertificates,omitempty" protobuf:"bytes,1,opt,name=kubeletServingCertificates"`
	// diskEncryption encrypts every machine's system volumes (STATE, which
	// holds its config, and EPHEMERAL, which holds its pods' data) with
	// LUKS2. Talos sets a volume's encryption only when it formats it, at
	// install: machines installed before it was set, or after it was
	// removed, keep what they have (their ConfigApplied condition says
	// ResetRequired) until a node-reset wipes and reinstalls them.
	// +optional
	DiskEncryption *DiskEncryption `json:"diskEncryption,omitempty" protobuf:"bytes,2,opt,name=diskEncryption"`
	// secureBoot is what a machine's boot must be before the cluster's
	// config, which holds its secrets, is installed on it.
	// +optional
	SecureBoot SecureBootRequirement `json:"secureBoot,omitempty" protobuf:"bytes,3,opt,name=secureBoot"`
}

// SecureBootRequirement is what Ichor requires of how a machine booted.
type SecureBootRequirement struct {
	// required installs the cluster's config only on a machine whose node
	// reports, over its maintenance API just before the install, that it
	// booted a signed UKI under firmware that enforces SecureBoot (its
	// SecurityState, recorded in the TalosMachine's status.security). A
	// TPM-sealed diskEncryption requires it whatever this says: the TPM
	// would refuse to seal the key. It is the node's own word, as Talos
	// reports it; it applies at install, and machines installed before keep
	// running. Use a SecureBoot installer (installerImage) so that
	// upgrades keep the machine SecureBoot.
	// +optional
	Required bool `json:"required,omitempty" protobuf:"varint,1,opt,name=required"`
	// installerImage is the repository of the cluster's SecureBoot installer
	// (factory.example/installer-secureboot/<schematic>, without a tag:
	// Ichor adds the cluster's Talos version), written into every
	// machine's machine.install.image, which installs and upgrades run. It
	// chooses what code the nodes run, so only admins set it, through the
	// talosclusters/installer-image subresource. Empty: the controller's
	// --install-image.
	// +optional
	InstallerImage string `json:"installerImage,omitempty" protobuf:"bytes,2,opt,name=installerImage"`
}

// DiskEncryption encrypts the system volumes STATE and EPHEMERAL with LUKS2.
type DiskEncryption struct {
	// key protects the volumes' keys. tpm seals them to the node's TPM and
	// its SecureBoot state: the node must boot a SecureBoot image (a UKI),
	// or enrolment fails at install; a disk taken away opens nowhere else.
	// nodeID derives them from the node's identity: a disk taken away from
	// its machine is protected from a casual reader only, since anyone who
	// knows the machine's identity can derive the key.
	Key DiskEncryptionKey `json:"key" protobuf:"bytes,1,opt,name=key,casttype=DiskEncryptionKey"`
}

// DiskEncryptionKey is what protects an encrypted volume's key.
// +enum
type DiskEncryptionKey string

const (
	DiskEncryptionKeyTPM    DiskEncryptionKey = "tpm"
	DiskEncryptionKeyNodeID DiskEncryptionKey = "nodeID"
)

// KubeletServingCertificates configures kubelet serving certificates.
type KubeletServingCertificates struct {
	// enabled turns on serverTLSBootstrap on every kubelet and Ichor's approver.
	// +optional
	Enabled bool `json:"enabled,omitempty" protobuf:"varint,1,opt,name=enabled"`
	// verifyFromAPIServer makes kube-apiserver verify kubelet serving certificates
	// once every machine holds one.
	// +optional
	VerifyFromAPIServer bool `json:"verifyFromAPIServer,omitempty" protobuf:"varint,2,opt,name=verifyFromAPIServer"`
}

// ClusterPhase summarises a cluster's state for people reading a table.
// +enum
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
	// +optional
	Phase ClusterPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=ClusterPhase"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,2,opt,name=observedGeneration"`
	// conditions: SecretsReady, MachinesReady, Bootstrapped, KubernetesAPIReady and others.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
	// override is a safety check the next change may go past, granted
	// through the override subresource; cleared when used.
	// +optional
	Override *OverrideStatus `json:"override,omitempty" protobuf:"bytes,4,opt,name=override"`
	// machines counts the cluster's machines.
	// +optional
	Machines MachineCounts `json:"machines,omitempty" protobuf:"bytes,5,opt,name=machines"`
	// talosVersion is the lowest Talos version running on the cluster's machines.
	// +optional
	TalosVersion string `json:"talosVersion,omitempty" protobuf:"bytes,6,opt,name=talosVersion"`
	// kubernetesVersion is the lowest Kubernetes version the cluster runs:
	// of its control-plane static pods, kube-proxy and kubelets, or the
	// answering API server's when none of them tells.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty" protobuf:"bytes,7,opt,name=kubernetesVersion"`
	// bootstrappedAt is when etcd was bootstrapped on the first control plane.
	// +optional
	BootstrappedAt *metav1.Time `json:"bootstrappedAt,omitempty" protobuf:"bytes,8,opt,name=bootstrappedAt"`
	// disruption is the cluster's disruption budget while a machine holds it:
	// at most one machine at a time is taken away (rebooted, its API server
	// restarted, reset), and it holds the budget until its node is back or
	// the action failed.
	// +optional
	Disruption *DisruptionStatus `json:"disruption,omitempty" protobuf:"bytes,9,opt,name=disruption"`
	// backup is what the backup schedule did last.
	// +optional
	Backup *ClusterBackupStatus `json:"backup,omitempty" protobuf:"bytes,10,opt,name=backup"`
	// kubernetesCA is the PEM certificate of the cluster's Kubernetes CA,
	// which issues its kube-apiserver's serving certificate: what a
	// kubeconfig for the cluster trusts (`ichor kubeconfig`). It is public;
	// its key stays in the secrets bundle.
	// +optional
	KubernetesCA string `json:"kubernetesCA,omitempty" protobuf:"bytes,11,opt,name=kubernetesCA"`
	// caRotation is the CA rotation under way: the machines' configs are
	// rendered at its phase. The new CA waits in a Secret of its own; the
	// secrets bundle changes only when the rotation completes.
	// +optional
	CARotation *CARotationStatus `json:"caRotation,omitempty" protobuf:"bytes,12,opt,name=caRotation"`
	// credentials are the new admin credentials of the last CA rotation
	// that completed, served once through talosclusters/credentials.
	// +optional
	Credentials *ClusterCredentialsStatus `json:"credentials,omitempty" protobuf:"bytes,13,opt,name=credentials"`
	// diskKeyRotation is the disk-encryption key rotation under way: the
	// machines' configs are rendered with the key slots of its phase.
	// +optional
	DiskKeyRotation *DiskKeyRotationStatus `json:"diskKeyRotation,omitempty" protobuf:"bytes,14,opt,name=diskKeyRotation"`
	// diskKeySlot is the LUKS2 key slot whose key unlocks the machines'
	// STATE and EPHEMERAL since the last disk-encryption key rotation
	// completed: 0 before any, then 1, 0, … in turn.
	// +optional
	DiskKeySlot int32 `json:"diskKeySlot,omitempty" protobuf:"varint,15,opt,name=diskKeySlot"`
	// secretsDigest is the SHA-256 of the secrets bundle ichor-controller
	// generated for this cluster (no spec.secretsRef), recorded before the
	// Secret is written and again whenever the controller changes it: a
	// Secret of that name holding anything else, whoever created it and
	// whatever it claims of itself, is never used.
	// +optional
	SecretsDigest string `json:"secretsDigest,omitempty" protobuf:"bytes,16,opt,name=secretsDigest"`
	// image says where the cluster's Talos image comes from, when the
	// installation has an image factory.
	// +optional
	Image *ImageStatus `json:"image,omitempty" protobuf:"bytes,17,opt,name=image"`
	// kubernetesKeyRotation is the rotation of the service-account signing
	// key, the secrets-encryption key or both under way: the control
	// planes' configs are rendered at its phase. The new keys wait in a
	// Secret of their own; the secrets bundle changes only when the
	// rotation completes.
	// +optional
	KubernetesKeyRotation *KubernetesKeyRotationStatus `json:"kubernetesKeyRotation,omitempty" protobuf:"bytes,18,opt,name=kubernetesKeyRotation"`
	// secretsEncryptionKeyName is the name kube-apiserver knows the
	// bundle's secretbox key by: Secrets at rest carry the name of the key
	// that encrypted them, so a key keeps its name for as long as it is in
	// force. Empty: Talos's own name for the bundle's key, key2.
	// +optional
	SecretsEncryptionKeyName string `json:"secretsEncryptionKeyName,omitempty" protobuf:"bytes,19,opt,name=secretsEncryptionKeyName"`
}

// KubernetesKeyRotationStatus is a rotation of a cluster's Kubernetes keys
// under way, in the three phases of a CA rotation: the new key accepted
// beside the old one (AcceptNew), then the new key signing and encrypting
// with the old one still accepted (IssueNew), then the new key alone
// (DropOld). Between the last two, every Secret is written again, so that
// none is left encrypted with the old key.
type KubernetesKeyRotationStatus struct {
	// operation is the key-rotation TalosOperation that runs it.
	Operation string `json:"operation" protobuf:"bytes,1,opt,name=operation"`
	// phase the control planes' configs are rendered at.
	Phase CARotationPhase `json:"phase" protobuf:"bytes,2,opt,name=phase,casttype=CARotationPhase"`
	// since is when the rotation entered its phase.
	// +optional
	Since *metav1.Time `json:"since,omitempty" protobuf:"bytes,3,opt,name=since"`
	// serviceAccount: the rotation replaces the service-account signing key.
	// +optional
	ServiceAccount bool `json:"serviceAccount,omitempty" protobuf:"varint,4,opt,name=serviceAccount"`
	// secretsEncryption: the rotation replaces the secretbox key that
	// encrypts Secrets at rest.
	// +optional
	SecretsEncryption bool `json:"secretsEncryption,omitempty" protobuf:"varint,5,opt,name=secretsEncryption"`
	// secretDigest is the SHA-256 of the new keys ichor-controller
	// generated, recorded before their Secret is written: a Secret of that
	// name holding other keys is never used.
	// +optional
	SecretDigest string `json:"secretDigest,omitempty" protobuf:"bytes,6,opt,name=secretDigest"`
}

// DiskKeyRotationPhase is how far a disk-encryption key rotation has
// moved the cluster's machine configs.
// +enum
type DiskKeyRotationPhase string

const (
	// DiskKeyRotationAddNew: the configs name the old key slot and the new
	// one; each machine enrolls the new key when it boots.
	DiskKeyRotationAddNew DiskKeyRotationPhase = "AddNew"
	// DiskKeyRotationDropOld: the configs name the new key slot alone; each
	// machine removes the old one when it boots.
	DiskKeyRotationDropOld DiskKeyRotationPhase = "DropOld"
)

// DiskKeyRotationPhases are the phases in the order a rotation moves
// through them.
var DiskKeyRotationPhases = []DiskKeyRotationPhase{DiskKeyRotationAddNew, DiskKeyRotationDropOld}

// DiskKeyRotationStatus is a disk-encryption key rotation under way on a
// cluster.
type DiskKeyRotationStatus struct {
	// operation is the key-rotation TalosOperation that runs it.
	Operation string `json:"operation" protobuf:"bytes,1,opt,name=operation"`
	// phase the cluster's machine configs are rendered at.
	Phase DiskKeyRotationPhase `json:"phase" protobuf:"bytes,2,opt,name=phase,casttype=DiskKeyRotationPhase"`
	// slot is the LUKS2 key slot of the new key.
	Slot int32 `json:"slot" protobuf:"varint,3,opt,name=slot"`
	// since is when the rotation entered its phase.
	// +optional
	Since *metav1.Time `json:"since,omitempty" protobuf:"bytes,4,opt,name=since"`
}

// ClusterCredentialsStatus is who took the new admin credentials of a
// cluster's last completed CA rotation, and when.
type ClusterCredentialsStatus struct {
	// rotation is the ca-rotation TalosOperation that completed.
	Rotation string `json:"rotation" protobuf:"bytes,1,opt,name=rotation"`
	// rotatedAt is when it completed.
	RotatedAt metav1.Time `json:"rotatedAt" protobuf:"bytes,2,opt,name=rotatedAt"`
	// servedTo is the user who downloaded them; empty until then.
	// +optional
	ServedTo string `json:"servedTo,omitempty" protobuf:"bytes,3,opt,name=servedTo"`
	// servedAt is when.
	// +optional
	ServedAt *metav1.Time `json:"servedAt,omitempty" protobuf:"bytes,4,opt,name=servedAt"`
	// request is the TalosCredentialRequest they were issued through.
	// +optional
	Request string `json:"request,omitempty" protobuf:"bytes,5,opt,name=request"`
}

// CARotationPhase is how far a Talos API CA rotation has moved the
// cluster's machine configs, in the order of Talos's own rotation.
// +enum
type CARotationPhase string

const (
	// CARotationAcceptNew: machine.acceptedCAs holds the new CA; the old
	// one still issues, and Ichor still signs with it.
	CARotationAcceptNew CARotationPhase = "AcceptNew"
	// CARotationIssueNew: the new CA issues (machine.ca), the old one is
	// accepted; Ichor signs with the new one.
	CARotationIssueNew CARotationPhase = "IssueNew"
	// CARotationDropOld: the new CA issues and nothing else is accepted.
	CARotationDropOld CARotationPhase = "DropOld"
)

// CARotationPhases are the phases in the order a rotation moves through
// them.
var CARotationPhases = []CARotationPhase{CARotationAcceptNew, CARotationIssueNew, CARotationDropOld}

// CARotationStatus is a CA rotation under way on a cluster.
type CARotationStatus struct {
	// operation is the ca-rotation TalosOperation that runs it.
	Operation string `json:"operation" protobuf:"bytes,1,opt,name=operation"`
	// phase the cluster's machine configs are rendered at.
	Phase CARotationPhase `json:"phase" protobuf:"bytes,2,opt,name=phase,casttype=CARotationPhase"`
	// since is when the rotation entered its phase.
	// +optional
	Since *metav1.Time `json:"since,omitempty" protobuf:"bytes,3,opt,name=since"`
	// talos: the rotation replaces the Talos API CA.
	// +optional
	Talos bool `json:"talos,omitempty" protobuf:"varint,4,opt,name=talos"`
	// kubernetes: the rotation replaces the Kubernetes CA.
	// +optional
	Kubernetes bool `json:"kubernetes,omitempty" protobuf:"varint,5,opt,name=kubernetes"`
	// secretDigest is the SHA-256 of the new CAs ichor-controller generated
	// for the rotation, recorded before their Secret is written: a Secret of
	// that name holding other CAs is never used.
	// +optional
	SecretDigest string `json:"secretDigest,omitempty" protobuf:"bytes,6,opt,name=secretDigest"`
}

// DisruptionAction is what takes a node, or an etcd member, away.
// +enum
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
// machine that may be away.
type DisruptionStatus struct {
	// machine is the TalosMachine that holds the budget.
	Machine string `json:"machine" protobuf:"bytes,1,opt,name=machine"`
	// machineUID is that machine's UID: a budget whose machine is gone is free.
	MachineUID types.UID `json:"machineUID" protobuf:"bytes,2,opt,name=machineUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// action the machine is taken away for.
	Action DisruptionAction `json:"action" protobuf:"bytes,3,opt,name=action,casttype=DisruptionAction"`
	// since is when the machine took the budget.
	Since metav1.Time `json:"since" protobuf:"bytes,4,opt,name=since"`
	// operation is the TalosOperation whose step holds the budget; empty
	// when the machine's own config rollout or deletion holds it.
	// +optional
	Operation string `json:"operation,omitempty" protobuf:"bytes,5,opt,name=operation"`
	// batch are more workers the operation's steps take away together
	// with machine, up to the operation's spec.maxUnavailable; each gives
	// its place back when its node is back.
	// +optional
	// +listType=map
	// +listMapKey=machine
	Batch []DisruptionMember `json:"batch,omitempty" protobuf:"bytes,6,rep,name=batch"`
}

// DisruptionMember is one more machine away under the budget.
type DisruptionMember struct {
	// machine is the TalosMachine's name.
	Machine string `json:"machine" protobuf:"bytes,1,opt,name=machine"`
	// machineUID is its UID.
	MachineUID types.UID `json:"machineUID" protobuf:"bytes,2,opt,name=machineUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// MachineCounts counts a cluster's machines.
type MachineCounts struct {
	// total machines in the cluster.
	Total int32 `json:"total" protobuf:"varint,1,opt,name=total"`
	// ready machines.
	Ready int32 `json:"ready" protobuf:"varint,2,opt,name=ready"`
	// controlPlanes in the cluster.
	ControlPlanes int32 `json:"controlPlanes" protobuf:"varint,3,opt,name=controlPlanes"`
	// workers in the cluster.
	Workers int32 `json:"workers" protobuf:"varint,4,opt,name=workers"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosClusterList is a list of TalosCluster objects.
type TalosClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosCluster `json:"items" protobuf:"bytes,2,rep,name=items"`
}
