package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=UpdateApproval,verb=update,subresource=approval
// +genclient:method=UpdateSchematic,verb=update,subresource=schematic
// +genclient:method=Override,verb=create,subresource=override,input=Override,result=TalosMachine
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosMachine is one node: where its Talos API is, which cluster and role it
// belongs to, and what Ichor has learned and pinned about it.
type TalosMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosMachineSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosMachineStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// TalosMachineSpec is what a user asks of a machine.
type TalosMachineSpec struct {
	// clusterName is the TalosCluster in this namespace the machine joins. Empty for a
	// machine that is known but not yet assigned. Once set it cannot change: moving a
	// machine to another cluster is a MachineReclaim.
	// +optional
	ClusterName string `json:"clusterName,omitempty" protobuf:"bytes,1,opt,name=clusterName"`
	// role of the machine in its cluster; defaults to worker once clusterName is set.
	// +optional
	Role MachineRole `json:"role,omitempty" protobuf:"bytes,2,opt,name=role,casttype=MachineRole"`
	// address is the host:port of the node's Talos API; the port defaults to 50000.
	Address string `json:"address" protobuf:"bytes,3,opt,name=address"`
	// hostname the node is given; when empty Talos picks one.
	// +optional
	Hostname string `json:"hostname,omitempty" protobuf:"bytes,4,opt,name=hostname"`
	// install says where Talos is installed.
	// +optional
	Install InstallSpec `json:"install,omitempty" protobuf:"bytes,5,opt,name=install"`
	// expectedFingerprint is the SPKI SHA-256 fingerprint (standard base64, the
	// form talosctl's --cert-fingerprint takes) of the certificate the node
	// presents in maintenance mode, read off its console. When set, Ichor
	// pins only that certificate and never trusts the first one that
	// answers; a node presenting another is reported and sent nothing.
	// Fixed once the machine is approved or rejected.
	// +optional
	ExpectedFingerprint string `json:"expectedFingerprint,omitempty" protobuf:"bytes,6,opt,name=expectedFingerprint"`
	// schematic replaces the cluster's spec.schematic for this machine (a
	// board that needs an overlay, a node with a GPU's extensions).
	// +optional
	Schematic *Schematic `json:"schematic,omitempty" protobuf:"bytes,7,opt,name=schematic"`
}

// InstallSpec says where Talos is installed.
type InstallSpec struct {
	// disk is the device path of the install disk (/dev/sda). When empty the
	// controller picks the smallest disk the node reports that is not on USB
	// (where boot media usually are).
	// +optional
	Disk string `json:"disk,omitempty" protobuf:"bytes,1,opt,name=disk"`
}

// MachinePhase summarises where a machine is in its life.
// +enum
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
	// +optional
	Phase MachinePhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=MachinePhase"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,2,opt,name=observedGeneration"`
	// conditions: Reachable, Approved, ConfigApplied, Ready and others.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
	// override is a safety check the next change may go past, granted
	// through the override subresource; cleared when used.
	// +optional
	Override *OverrideStatus `json:"override,omitempty" protobuf:"bytes,4,opt,name=override"`
	// maintenance records the certificate the node presented in maintenance mode.
	// +optional
	Maintenance *MaintenanceStatus `json:"maintenance,omitempty" protobuf:"bytes,5,opt,name=maintenance"`
	// hardware facts read from the node.
	// +optional
	Hardware *HardwareStatus `json:"hardware,omitempty" protobuf:"bytes,6,opt,name=hardware"`
	// talosVersion the node runs.
	// +optional
	TalosVersion string `json:"talosVersion,omitempty" protobuf:"bytes,7,opt,name=talosVersion"`
	// nodeName is the node's name in its Kubernetes cluster.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,8,opt,name=nodeName"`
	// approval records the decision to admit or reject the machine.
	// +optional
	Approval *ApprovalStatus `json:"approval,omitempty" protobuf:"bytes,9,opt,name=approval"`
	// appliedConfig describes the last machine config applied.
	// +optional
	AppliedConfig *AppliedConfigStatus `json:"appliedConfig,omitempty" protobuf:"bytes,10,opt,name=appliedConfig"`
	// kubeletServingCertificate records the kubelet serving certificate Ichor approved.
	// +optional
	KubeletServingCertificate *KubeletServingCertificateStatus `json:"kubeletServingCertificate,omitempty" protobuf:"bytes,11,opt,name=kubeletServingCertificate"`
	// kubernetes are the versions a running kubernetes-upgrade set for the
	// machine's Kubernetes components: its config renders each component
	// set here at that version instead of the cluster's
	// spec.kubernetesVersion. The upgrade sets them one component and one
	// machine at a time, and removes them once the cluster's
	// spec.kubernetesVersion follows; one that fails or is deleted leaves
	// them, and the next kubernetes-upgrade moves them on.
	// +optional
	Kubernetes *KubernetesVersions `json:"kubernetes,omitempty" protobuf:"bytes,12,opt,name=kubernetes"`
	// security is what the node reports of how it booted (its SecurityState
	// resource), read over its authenticated Talos API while it runs its
	// config. It is the node's word: that the firmware really enforces
	// SecureBoot only the hardware proves (docs/hardening.md).
	// +optional
	Security *MachineSecurityStatus `json:"security,omitempty" protobuf:"bytes,13,opt,name=security"`
}

// MachineSecurityStatus is what a node reports of how it booted.
type MachineSecurityStatus struct {
	// secureBoot: the firmware enforces SecureBoot (not in setup mode) and
	// the node booted under it.
	// +optional
	SecureBoot bool `json:"secureBoot,omitempty" protobuf:"varint,1,opt,name=secureBoot"`
	// bootedWithUKI: the node booted a unified kernel image.
	// +optional
	BootedWithUKI bool `json:"bootedWithUKI,omitempty" protobuf:"varint,2,opt,name=bootedWithUKI"`
	// moduleSignatureEnforced: the kernel loads signed modules only.
	// +optional
	ModuleSignatureEnforced bool `json:"moduleSignatureEnforced,omitempty" protobuf:"varint,3,opt,name=moduleSignatureEnforced"`
	// pcrSigningKeyFingerprint is the fingerprint of the key that signed the
	// booted image's PCR policy, which TPM-sealed disk keys are bound to.
	// +optional
	PCRSigningKeyFingerprint string `json:"pcrSigningKeyFingerprint,omitempty" protobuf:"bytes,4,opt,name=pcrSigningKeyFingerprint"`
}

// KubernetesVersions are versions of a machine's Kubernetes components,
// semantic versions with a leading v. An empty one is the cluster's.
type KubernetesVersions struct {
	// apiServer is kube-apiserver's version (control planes).
	// +optional
	APIServer string `json:"apiServer,omitempty" protobuf:"bytes,1,opt,name=apiServer"`
	// controllerManager is kube-controller-manager's version (control planes).
	// +optional
	ControllerManager string `json:"controllerManager,omitempty" protobuf:"bytes,2,opt,name=controllerManager"`
	// scheduler is kube-scheduler's version (control planes).
	// +optional
	Scheduler string `json:"scheduler,omitempty" protobuf:"bytes,3,opt,name=scheduler"`
	// proxy is kube-proxy's version, as the control planes' manifests give it.
	// +optional
	Proxy string `json:"proxy,omitempty" protobuf:"bytes,4,opt,name=proxy"`
	// kubelet is the kubelet's version.
	// +optional
	Kubelet string `json:"kubelet,omitempty" protobuf:"bytes,5,opt,name=kubelet"`
}

// MaintenanceStatus is the pinned maintenance-mode certificate.
type MaintenanceStatus struct {
	// certificateFingerprint is the SHA-256 of the certificate's SubjectPublicKeyInfo in
	// standard base64, the form talosctl's --cert-fingerprint takes. Configuration is only
	// ever sent to a node presenting it.
	CertificateFingerprint string `json:"certificateFingerprint" protobuf:"bytes,1,opt,name=certificateFingerprint"`
	// seenAt is when the certificate was first seen.
	SeenAt metav1.Time `json:"seenAt" protobuf:"bytes,2,opt,name=seenAt"`
}

// HardwareStatus holds hardware facts read over the Talos API.
type HardwareStatus struct {
	// uuid of the system (SMBIOS).
	// +optional
	UUID string `json:"uuid,omitempty" protobuf:"bytes,1,opt,name=uuid"`
	// serial number of the system.
	// +optional
	Serial string `json:"serial,omitempty" protobuf:"bytes,2,opt,name=serial"`
	// disks attached to the node.
	// +optional
	// +listType=map
	// +listMapKey=path
	Disks []Disk `json:"disks,omitempty" protobuf:"bytes,3,rep,name=disks"`
	// addresses of the node's links, in CIDR notation.
	// +optional
	// +listType=atomic
	Addresses []string `json:"addresses,omitempty" protobuf:"bytes,4,rep,name=addresses"`
}

// Disk is one block device of a node.
type Disk struct {
	// path of the device (/dev/sda).
	Path string `json:"path" protobuf:"bytes,1,opt,name=path"`
	// sizeBytes of the device.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty" protobuf:"varint,2,opt,name=sizeBytes"`
	// model of the device.
	// +optional
	Model string `json:"model,omitempty" protobuf:"bytes,3,opt,name=model"`
	// serial of the device.
	// +optional
	Serial string `json:"serial,omitempty" protobuf:"bytes,4,opt,name=serial"`
	// transport is the bus the device is on (sata, nvme, virtio, usb, ...).
	// +optional
	Transport string `json:"transport,omitempty" protobuf:"bytes,5,opt,name=transport"`
}

// ApprovalDecision is the outcome of an approval.
// +enum
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
	Decision ApprovalDecision `json:"decision" protobuf:"bytes,1,opt,name=decision,casttype=ApprovalDecision"`
	// by is the user who decided.
	By string `json:"by" protobuf:"bytes,2,opt,name=by"`
	// at is when the decision was taken.
	At metav1.Time `json:"at" protobuf:"bytes,3,opt,name=at"`
	// reason given by the user.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,4,opt,name=reason"`
}

// AppliedConfigStatus describes the machine config last applied to a node.
type AppliedConfigStatus struct {
	// hash is the SHA-256 of the applied config, as hex.
	Hash string `json:"hash" protobuf:"bytes,1,opt,name=hash"`
	// effect of the change that was applied.
	// +optional
	Effect ConfigEffect `json:"effect,omitempty" protobuf:"bytes,2,opt,name=effect,casttype=ConfigEffect"`
	// appliedAt is when the node accepted it.
	AppliedAt metav1.Time `json:"appliedAt" protobuf:"bytes,3,opt,name=appliedAt"`
	// contract is the Talos version contract the config was rendered for
	// (v1.14): the layout it is in.
	// +optional
	Contract string `json:"contract,omitempty" protobuf:"bytes,4,opt,name=contract"`
}

// KubeletServingCertificateStatus records an approved kubelet serving certificate.
type KubeletServingCertificateStatus struct {
	// request is the name of the CertificateSigningRequest.
	Request string `json:"request" protobuf:"bytes,1,opt,name=request"`
	// issuedAt is when the certificate was issued.
	// +optional
	IssuedAt *metav1.Time `json:"issuedAt,omitempty" protobuf:"bytes,2,opt,name=issuedAt"`
	// notAfter is when the certificate expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty" protobuf:"bytes,3,opt,name=notAfter"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosMachineList is a list of TalosMachine objects.
type TalosMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosMachine `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// Version is component c's version in v, or "".
func (v *KubernetesVersions) Version(c KubernetesComponent) string {
	if v == nil {
		return ""
	}
	if f := v.field(c); f != nil {
		return *f
	}
	return ""
}

// SetVersion sets component c's version in v.
func (v *KubernetesVersions) SetVersion(c KubernetesComponent, version string) {
	if f := v.field(c); f != nil {
		*f = version
	}
}

func (v *KubernetesVersions) field(c KubernetesComponent) *string {
	switch c {
	case ComponentAPIServer:
		return &v.APIServer
	case ComponentControllerManager:
		return &v.ControllerManager
	case ComponentScheduler:
		return &v.Scheduler
	case ComponentProxy:
		return &v.Proxy
	case ComponentKubelet:
		return &v.Kubelet
	}
	return nil
}
