package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosMachine is one node: where its Talos API is, which cluster and role it
// belongs to, and what Ichor has learned and pinned about it.
type TalosMachine struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosMachineSpec
	Status TalosMachineStatus
}

// TalosMachineSpec is what a user asks of a machine.
type TalosMachineSpec struct {
	// clusterName is the TalosCluster in this namespace the machine joins. Empty for a
	// machine that is known but not yet assigned. Once set it cannot change: moving a
	// machine to another cluster is a MachineReclaim.
	ClusterName string
	// role of the machine in its cluster; defaults to worker once clusterName is set.
	Role MachineRole
	// address is the host:port of the node's Talos API; the port defaults to 50000.
	Address string
	// hostname the node is given; when empty Talos picks one.
	Hostname string
	// install says where Talos is installed.
	Install InstallSpec
	// ExpectedFingerprint is the maintenance certificate's SPKI fingerprint
	// the user read off the node: the only one Ichor pins, when set.
	ExpectedFingerprint string
	// schematic replaces the cluster's for this machine.
	Schematic *Schematic
}

// InstallSpec says where Talos is installed.
type InstallSpec struct {
	// disk is the device path of the install disk (/dev/sda). When empty the
	// controller picks the smallest disk the node reports that is not on USB.
	Disk string
}

// MachinePhase summarises where a machine is in its life.
type MachinePhase string

const (
	MachinePhaseDiscovered      MachinePhase = "Discovered"
	MachinePhasePendingApproval MachinePhase = "PendingApproval"
	MachinePhaseApproved        MachinePhase = "Approved"
	MachinePhaseRejected        MachinePhase = "Rejected"
	MachinePhaseConfiguring     MachinePhase = "Configuring"
	MachinePhaseReady           MachinePhase = "Ready"
	MachinePhaseResetting       MachinePhase = "Resetting"
	MachinePhaseUnreachable     MachinePhase = "Unreachable"
)

// TalosMachineStatus is what the controller observed and decided about a machine.
type TalosMachineStatus struct {
	// phase summarises the conditions.
	Phase MachinePhase
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// conditions: Reachable, Approved, ConfigApplied, Ready and others.
	Conditions []metav1.Condition
	// Override is a granted safety-check override, cleared when used.
	Override *OverrideStatus
	// maintenance records the certificate the node presented in maintenance mode.
	Maintenance *MaintenanceStatus
	// hardware facts read from the node.
	Hardware *HardwareStatus
	// talosVersion the node runs.
	TalosVersion string
	// nodeName is the node's name in its Kubernetes cluster.
	NodeName string
	// approval records the decision to admit or reject the machine.
	Approval *ApprovalStatus
	// appliedConfig describes the last machine config applied.
	AppliedConfig *AppliedConfigStatus
	// kubeletServingCertificate records the kubelet serving certificate Ichor approved.
	KubeletServingCertificate *KubeletServingCertificateStatus
	// kubernetes are the versions a kubernetes-upgrade set for the machine's
	// Kubernetes components while it runs.
	Kubernetes *KubernetesVersions
	// security is what the node reports of how it booted.
	Security *MachineSecurityStatus
}

// MachineSecurityStatus is what a node reports of how it booted.
type MachineSecurityStatus struct {
	SecureBoot               bool
	BootedWithUKI            bool
	ModuleSignatureEnforced  bool
	PCRSigningKeyFingerprint string
}

// KubernetesVersions are versions of a machine's Kubernetes components.
type KubernetesVersions struct {
	APIServer         string
	ControllerManager string
	Scheduler         string
	Proxy             string
	Kubelet           string
}

// MaintenanceStatus is the pinned maintenance-mode certificate.
type MaintenanceStatus struct {
	// certificateFingerprint is the SHA-256 of the certificate's SubjectPublicKeyInfo in
	// standard base64, the form talosctl's --cert-fingerprint takes. Configuration is only
	// ever sent to a node presenting it.
	CertificateFingerprint string
	// seenAt is when the certificate was first seen.
	SeenAt metav1.Time
}

// HardwareStatus holds hardware facts read over the Talos API.
type HardwareStatus struct {
	// uuid of the system (SMBIOS).
	UUID string
	// serial number of the system.
	Serial string
	// disks attached to the node.
	Disks []Disk
	// addresses of the node's links, in CIDR notation.
	Addresses []string
}

// Disk is one block device of a node.
type Disk struct {
	// path of the device (/dev/sda).
	Path string
	// sizeBytes of the device.
	SizeBytes int64
	// model of the device.
	Model string
	// serial of the device.
	Serial string
	// transport is the bus the device is on (sata, nvme, virtio, usb, ...).
	Transport string
}

// ApprovalDecision is the outcome of an approval.
type ApprovalDecision string

const (
	// ApprovalApproved admits the machine into its cluster.
	ApprovalApproved ApprovalDecision = "Approved"
	// ApprovalRejected keeps the machine out; it is never configured.
	ApprovalRejected ApprovalDecision = "Rejected"
)

// ApprovalStatus records who decided about a machine, and why.
type ApprovalStatus struct {
	// decision taken.
	Decision ApprovalDecision
	// by is the user who decided.
	By string
	// at is when the decision was taken.
	At metav1.Time
	// reason given by the user.
	Reason string
}

// AppliedConfigStatus describes the machine config last applied to a node.
type AppliedConfigStatus struct {
	// hash is the SHA-256 of the applied config, as hex.
	Hash string
	// effect of the change that was applied.
	Effect ConfigEffect
	// appliedAt is when the node accepted it.
	AppliedAt metav1.Time
	// contract is the Talos version contract the config was rendered for.
	Contract string
}

// KubeletServingCertificateStatus records an approved kubelet serving certificate.
type KubeletServingCertificateStatus struct {
	// request is the name of the CertificateSigningRequest.
	Request string
	// issuedAt is when the certificate was issued.
	IssuedAt *metav1.Time
	// notAfter is when the certificate expires.
	NotAfter *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosMachineList is a list of TalosMachine objects.
type TalosMachineList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosMachine
}
