package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=Start,verb=create,subresource=start
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosOperation is one operation on a cluster or some of its machines. It is
// created Pending and only the start subresource sets it running; its spec
// cannot change after creation.
type TalosOperation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosOperationSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosOperationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// OperationType names what an operation does.
// +enum
type OperationType string

const (
	OperationTalosUpgrade      OperationType = "talos-upgrade"
	OperationKubernetesUpgrade OperationType = "kubernetes-upgrade"
	OperationReboot            OperationType = "reboot"
	OperationEtcdDefrag        OperationType = "etcd-defrag"
	OperationCARotation        OperationType = "ca-rotation"
	OperationKeyRotation       OperationType = "key-rotation"
	OperationEtcdRestore       OperationType = "etcd-restore"
	OperationNodeReset         OperationType = "node-reset"
	OperationNodeShutdown      OperationType = "node-shutdown"
	OperationShutdown          OperationType = "shutdown"
)

// KubernetesComponent is a Kubernetes component a kubernetes-upgrade
// moves to the new version.
// +enum
type KubernetesComponent string

// The components, in the order a kubernetes-upgrade moves them (that of
// talosctl upgrade-k8s): the control planes' static pods one component at a
// time, kube-proxy, then every machine's kubelet.
const (
	ComponentAPIServer         KubernetesComponent = "kube-apiserver"
	ComponentControllerManager KubernetesComponent = "kube-controller-manager"
	ComponentScheduler         KubernetesComponent = "kube-scheduler"
	ComponentProxy             KubernetesComponent = "kube-proxy"
	ComponentKubelet           KubernetesComponent = "kubelet"
)

// KubernetesComponents are the components in the order a
// kubernetes-upgrade moves them.
var KubernetesComponents = []KubernetesComponent{
	ComponentAPIServer, ComponentControllerManager, ComponentScheduler, ComponentProxy, ComponentKubelet,
}

// StepAction is what a step does on its machine, for the operation types
// whose steps do different things: an etcd-restore and a shutdown.
// +enum
type StepAction string

// The actions of an etcd-restore, in the order they run: the control
// planes but the first leave etcd, the first's etcd data is wiped (the old
// cluster ends with its last member), then the others', the snapshot is
// recovered on the first, the others join it, and every worker's kubelet
// is restarted. The recovery itself is that of Talos's disaster-recovery
// guide.
const (
	// ActionLeaveEtcd removes the machine's member from etcd; its etcd
	// stays stopped until it reboots.
	ActionLeaveEtcd StepAction = "leave-etcd"
	// ActionWipeEtcd resets the machine's EPHEMERAL partition (its etcd
	// data) without leaving etcd, and reboots it.
	ActionWipeEtcd StepAction = "wipe-etcd"
	// ActionRecoverEtcd uploads the snapshot, bootstraps etcd from it, and
	// waits until the cluster's kube-apiserver serves the snapshot's data.
	ActionRecoverEtcd StepAction = "recover-etcd"
	// ActionJoinEtcd waits for the machine to join the recovered etcd.
	ActionJoinEtcd StepAction = "join-etcd"
	// ActionRestartKubelet restarts the machine's kubelet.
	ActionRestartKubelet StepAction = "restart-kubelet"
)

// The first step of a shutdown: a backup of the cluster before any node
// goes down. Its other steps power the machines off, workers first.
const (
	// ActionBackup creates a TalosBackup of the cluster (its etcd snapshot
	// and every machine's config) and waits for it to succeed.
	ActionBackup StepAction = "backup"
)

// The steps of a ca-rotation: each machine, control planes first, through
// the phases of Talos's own rotation (talosctl rotate-ca), one phase after
// the other; see CARotationPhase.
const (
	// ActionAcceptNewCA checks that the machine's node accepts the new CA
	// beside the old one, and a client certificate from the new CA.
	ActionAcceptNewCA StepAction = "accept-new-ca"
	// ActionIssueFromNewCA checks that the node's Talos API certificate
	// comes from the new CA, the old one still accepted.
	ActionIssueFromNewCA StepAction = "issue-from-new-ca"
	// ActionDropOldCA checks that the node accepts the new CA alone.
	ActionDropOldCA StepAction = "drop-old-ca"
)

// The steps of a key-rotation of the disk-encryption key: each machine,
// control planes first, through the two boots Talos needs to replace a
// LUKS2 key slot; see DiskKeyRotationPhase.
const (
	// ActionAddDiskKey checks that the machine's node booted with the new
	// key slot beside the old one, opened STATE and EPHEMERAL with the old
	// key and enrolled the new one without a failure.
	ActionAddDiskKey StepAction = "add-new-disk-key"
	// ActionDropOldDiskKey checks that the node booted with the new key
	// slot alone, opened STATE and EPHEMERAL with it and removed the old one.
	ActionDropOldDiskKey StepAction = "drop-old-disk-key"
)

// The steps of a key-rotation of Kubernetes keys (serviceAccount,
// secretsEncryption): each control plane, in the three phases of
// KubernetesKeyRotationStatus.
const (
	// ActionAcceptNewKeys checks that the control plane's kube-apiserver
	// runs with the new keys accepted beside the old ones.
	ActionAcceptNewKeys StepAction = "accept-new-keys"
	// ActionIssueFromNewKeys checks that it signs and encrypts with the new
	// keys, the old ones still accepted.
	ActionIssueFromNewKeys StepAction = "issue-from-new-keys"
	// ActionDropOldKeys writes every Secret again (first step only), then
	// checks that the kube-apiserver runs with the new keys alone.
	ActionDropOldKeys StepAction = "drop-old-keys"
)

// TalosOperationSpec says what to do and to which machines.
type TalosOperationSpec struct {
	// clusterName is the TalosCluster in this namespace the operation acts on.
	ClusterName string `json:"clusterName" protobuf:"bytes,1,opt,name=clusterName"`
	// type of the operation.
	Type OperationType `json:"type" protobuf:"bytes,2,opt,name=type,casttype=OperationType"`
	// machines the operation acts on; empty means what the type implies
	// (every machine, or the control planes for etcd operations).
	// +optional
	// +listType=set
	Machines []string `json:"machines,omitempty" protobuf:"bytes,3,rep,name=machines"`
	// talosUpgrade parameters; required for talos-upgrade, forbidden otherwise.
	// +optional
	TalosUpgrade *TalosUpgradeParameters `json:"talosUpgrade,omitempty" protobuf:"bytes,4,opt,name=talosUpgrade"`
	// kubernetesUpgrade parameters; required for kubernetes-upgrade, forbidden otherwise.
	// +optional
	KubernetesUpgrade *KubernetesUpgradeParameters `json:"kubernetesUpgrade,omitempty" protobuf:"bytes,5,opt,name=kubernetesUpgrade"`
	// nodeReset parameters; allowed for node-reset only.
	// +optional
	NodeReset *NodeResetParameters `json:"nodeReset,omitempty" protobuf:"bytes,6,opt,name=nodeReset"`
	// etcdRestore parameters; required for etcd-restore, forbidden otherwise.
	// +optional
	EtcdRestore *EtcdRestoreParameters `json:"etcdRestore,omitempty" protobuf:"bytes,7,opt,name=etcdRestore"`
	// reboot parameters; allowed for reboot only.
	// +optional
	Reboot *RebootParameters `json:"reboot,omitempty" protobuf:"bytes,8,opt,name=reboot"`
	// maxUnavailable is how many workers a talos-upgrade, a reboot, a
	// node-shutdown or a shutdown takes away at once, each holding a place
	// in the cluster's disruption budget; control planes always go one at a
	// time. Default 1.
	// +optional
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty" protobuf:"varint,9,opt,name=maxUnavailable"`
	// nodeShutdown parameters; allowed for node-shutdown only.
	// +optional
	NodeShutdown *NodeShutdownParameters `json:"nodeShutdown,omitempty" protobuf:"bytes,10,opt,name=nodeShutdown"`
	// caRotation parameters; allowed for ca-rotation only (defaulted there).
	// +optional
	CARotation *CARotationParameters `json:"caRotation,omitempty" protobuf:"bytes,11,opt,name=caRotation"`
	// keyRotation parameters; allowed for key-rotation only (defaulted there).
	// +optional
	KeyRotation *KeyRotationParameters `json:"keyRotation,omitempty" protobuf:"bytes,12,opt,name=keyRotation"`
}

// RotatableKey names a key of a cluster that a key-rotation replaces.
// +enum
type RotatableKey string

const (
	// KeyDiskEncryption is the key that unlocks the LUKS2 volumes STATE and
	// EPHEMERAL of every machine (spec.security.diskEncryption with the tpm
	// key). Talos enrolls a key slot the config adds and removes one it no
	// longer names when it opens a volume, at boot: a rotation adds a new
	// TPM-sealed key in a second slot (one reboot of each machine), then
	// drops the old slot (a second reboot), one machine at a time.
	KeyDiskEncryption RotatableKey = "diskEncryption"
	// KeyServiceAccount is the key kube-apiserver signs service-account
	// tokens with, on clusters of the v1.14 contract
	// (KubeServiceAccountConfig accepts other keys beside it): the control
	// planes accept the new key, then sign with it, the old one still
	// accepted, then drop the old one, one control plane at a time (a
	// restart of kube-apiserver each, no reboot). A token signed with the
	// old key works until the last phase.
	KeyServiceAccount RotatableKey = "serviceAccount"
	// KeySecretsEncryption is the secretbox key kube-apiserver encrypts
	// Secrets at rest with, on clusters of the v1.14 contract
	// (KubeEtcdEncryptionConfig takes several keys): the same three
	// phases, and between the last two every Secret is written again, so
	// none is left that only the old key reads.
	KeySecretsEncryption RotatableKey = "secretsEncryption"
)

// KeyRotationParameters say which of the cluster's keys a key-rotation
// replaces.
type KeyRotationParameters struct {
	// keys to rotate. Defaults to [diskEncryption]. serviceAccount and
	// secretsEncryption need the v1.14 contract (Talos v1.13 takes one key
	// of each) and rotate together or alone, but not with diskEncryption,
	// whose phases are reboots of every machine.
	// +optional
	// +listType=set
	Keys []RotatableKey `json:"keys,omitempty" protobuf:"bytes,1,rep,name=keys,casttype=RotatableKey"`
	// dryRun reports, step by step, what the rotation would change on each
	// machine without touching a node.
	// +optional
	DryRun bool `json:"dryRun,omitempty" protobuf:"varint,2,opt,name=dryRun"`
	// serviceAccountGracePeriod is how long the old service-account key
	// stays accepted once the new one signs on every control plane, before
	// it is dropped: a kubelet renews a pod's projected token once it is a
	// day old (kube-apiserver extends the hour it asks for to a year), so a
	// shorter period leaves running pods holding tokens of the dropped key
	// until their kubelet renews them. Defaults to 24h when serviceAccount
	// is rotated; 0s drops the old key at once. At most 720h.
	// +optional
	ServiceAccountGracePeriod *metav1.Duration `json:"serviceAccountGracePeriod,omitempty" protobuf:"bytes,3,opt,name=serviceAccountGracePeriod"`
}

// CARotationParameters say which of the cluster's CAs a ca-rotation
// replaces: one or both, in the same three phases.
type CARotationParameters struct {
	// talos rotates the Talos API CA, which issues every node's Talos API
	// certificate and every talosconfig's client certificate. Defaults to
	// true.
	// +optional
	Talos *bool `json:"talos,omitempty" protobuf:"varint,1,opt,name=talos"`
	// kubernetes rotates the Kubernetes CA (cluster.ca), which issues
	// kube-apiserver's serving certificate, every kubelet's client
	// certificate and every kubeconfig's. kube-apiserver and the controller
	// manager restart on each control plane, one at a time, and every
	// kubelet restarts, bootstrapping a new client certificate once the old
	// CA is dropped. Defaults to false; set talos to false to rotate this
	// CA alone.
	// +optional
	Kubernetes *bool `json:"kubernetes,omitempty" protobuf:"varint,3,opt,name=kubernetes"`
	// dryRun reports, step by step, what the rotation would change on each
	// machine without generating a CA or touching a node.
	// +optional
	DryRun bool `json:"dryRun,omitempty" protobuf:"varint,2,opt,name=dryRun"`
}

// NodeShutdownParameters are the inputs of a node-shutdown.
type NodeShutdownParameters struct {
	// force skips cordoning and draining the node (talosctl shutdown
	// --force); its pods are still stopped. Default false: Talos cordons and
	// drains the node first, and uncordons it when it boots again.
	// +optional
	Force bool `json:"force,omitempty" protobuf:"varint,1,opt,name=force"`
}

// RebootParameters are the inputs of a reboot.
type RebootParameters struct {
	// force skips cordoning and draining the node and stopping its services
	// gracefully (talosctl reboot --mode force). Default false: graceful.
	// +optional
	Force bool `json:"force,omitempty" protobuf:"varint,1,opt,name=force"`
}

// TalosUpgradeParameters are the inputs of a Talos upgrade.
type TalosUpgradeParameters struct {
	// version to upgrade to, as a semantic version with a leading v.
	Version string `json:"version" protobuf:"bytes,1,opt,name=version"`
	// stage installs the new version without rebooting: it runs from the
	// node's next reboot on, whatever causes it. Nothing is disrupted, so a
	// staged upgrade does not hold the disruption budget.
	// +optional
	Stage bool `json:"stage,omitempty" protobuf:"varint,2,opt,name=stage"`
}

// KubernetesUpgradeParameters are the inputs of a Kubernetes upgrade.
type KubernetesUpgradeParameters struct {
	// version to upgrade to, as a semantic version with a leading v.
	Version string `json:"version" protobuf:"bytes,1,opt,name=version"`
}

// NodeResetParameters are the inputs of a node reset.
type NodeResetParameters struct {
	// graceful drains the node first and, when its system disk is wiped,
	// has a control plane leave etcd; with user-disks the node keeps its
	// etcd member. Defaults to true; a control plane's system disk is only
	// wiped gracefully.
	// +optional
	Graceful *bool `json:"graceful,omitempty" protobuf:"varint,1,opt,name=graceful"`
	// wipe selects the disks to wipe; defaults to all. With all and
	// system-disk the node comes back in maintenance mode and Ichor
	// installs its config again; with user-disks it keeps its config.
	// +optional
	Wipe WipeMode `json:"wipe,omitempty" protobuf:"bytes,2,opt,name=wipe,casttype=WipeMode"`
	// userDisks are the device paths (/dev/sdb) of user disks to wipe, with
	// wipe all or user-disks; required for user-disks, forbidden for
	// system-disk. The system disk cannot be one of them.
	// +optional
	// +listType=set
	UserDisks []string `json:"userDisks,omitempty" protobuf:"bytes,3,rep,name=userDisks"`
}

// IdentitySecretKey is the key of an etcd-restore's identity Secret that
// holds the age identity.
const IdentitySecretKey = "identity"

// EtcdRestoreParameters are the inputs of an etcd restore.
type EtcdRestoreParameters struct {
	// backup is the succeeded TalosBackup of the same cluster, in this
	// namespace, whose etcd snapshot is restored. Snapshots are gigabytes:
	// they come from the backup target, never from a Secret.
	Backup string `json:"backup" protobuf:"bytes,1,opt,name=backup"`
	// identitySecret names a Secret in this namespace whose "identity" key
	// holds an age identity (AGE-SECRET-KEY-1...) of one of the backup's
	// recipients. The controller holds no identity that can decrypt a
	// backup: it reads this one only while the restore verifies and
	// uploads the snapshot, and never copies it. Delete the Secret once the
	// restore ended.
	IdentitySecret string `json:"identitySecret" protobuf:"bytes,2,opt,name=identitySecret"`
}

// OperationPhase is where an operation is in its life.
// +enum
type OperationPhase string

const (
	OperationPending   OperationPhase = "Pending"
	OperationRunning   OperationPhase = "Running"
	OperationSucceeded OperationPhase = "Succeeded"
	OperationFailed    OperationPhase = "Failed"
)

// TalosOperationStatus is the progress of an operation.
type TalosOperationStatus struct {
	// phase of the operation; Pending until started.
	// +optional
	Phase OperationPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=OperationPhase"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,2,opt,name=observedGeneration"`
	// startedBy is the user who started the operation.
	// +optional
	StartedBy string `json:"startedBy,omitempty" protobuf:"bytes,3,opt,name=startedBy"`
	// startedAt is when it was started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty" protobuf:"bytes,4,opt,name=startedAt"`
	// completedAt is when it succeeded or failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,5,opt,name=completedAt"`
	// steps are the progress records: one per machine, or for a
	// kubernetes-upgrade one per machine and component, in the order they run.
	// +optional
	// +listType=atomic
	Steps []OperationStep `json:"steps,omitempty" protobuf:"bytes,6,rep,name=steps"`
	// conditions of the operation.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,7,rep,name=conditions"`
}

// OperationStep is the progress of an operation on one machine.
type OperationStep struct {
	// machine is the TalosMachine name.
	Machine string `json:"machine" protobuf:"bytes,1,opt,name=machine"`
	// phase of this step.
	Phase OperationPhase `json:"phase" protobuf:"bytes,2,opt,name=phase,casttype=OperationPhase"`
	// message says what happened, for people.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,3,opt,name=message"`
	// startedAt is when the step began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty" protobuf:"bytes,4,opt,name=startedAt"`
	// completedAt is when the step ended.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,5,opt,name=completedAt"`
	// bootID is the node's boot ID before the step rebooted it: a node that
	// answers with another one has rebooted.
	// +optional
	BootID string `json:"bootID,omitempty" protobuf:"bytes,6,opt,name=bootID"`
	// component is the Kubernetes component a kubernetes-upgrade step
	// upgrades on the machine.
	// +optional
	Component KubernetesComponent `json:"component,omitempty" protobuf:"bytes,7,opt,name=component,casttype=KubernetesComponent"`
	// action is what an etcd-restore step does on the machine.
	// +optional
	Action StepAction `json:"action,omitempty" protobuf:"bytes,8,opt,name=action,casttype=StepAction"`
	// acceptedAt is when the node answered a node-reset's call: only a node
	// that accepted its reset is taken back in maintenance mode.
	// +optional
	AcceptedAt *metav1.Time `json:"acceptedAt,omitempty" protobuf:"bytes,9,opt,name=acceptedAt"`
}

// Name is the step as people read it: its machine, and its component
// ("cp-2 kube-controller-manager").
func (s OperationStep) Name() string {
	switch {
	case s.Component != "":
		return s.Machine + " " + string(s.Component)
	case s.Action != "":
		return s.Machine + " " + string(s.Action)
	}
	return s.Machine
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosOperationList is a list of TalosOperation objects.
type TalosOperationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosOperation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
