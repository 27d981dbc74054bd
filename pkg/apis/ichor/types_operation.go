package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosOperation is one operation on a cluster or some of its machines. It is
// created Pending and only the start subresource sets it running; its spec
// cannot change after creation.
type TalosOperation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosOperationSpec
	Status TalosOperationStatus
}

// OperationType names what an operation does; Operations describes each.
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

// StepAction is what a step does on its machine, for the operation types
// whose steps do different things: an etcd-restore and a shutdown.
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

// The steps of a ca-rotation; see v1alpha1.
const (
	ActionAcceptNewCA    StepAction = "accept-new-ca"
	ActionIssueFromNewCA StepAction = "issue-from-new-ca"
	ActionDropOldCA      StepAction = "drop-old-ca"
)

// The steps of a key-rotation of the disk-encryption key; see v1alpha1.
const (
	ActionAddDiskKey     StepAction = "add-new-disk-key"
	ActionDropOldDiskKey StepAction = "drop-old-disk-key"
)

// The steps of a key-rotation of Kubernetes keys; see v1alpha1.
const (
	ActionAcceptNewKeys    StepAction = "accept-new-keys"
	ActionIssueFromNewKeys StepAction = "issue-from-new-keys"
	ActionDropOldKeys      StepAction = "drop-old-keys"
)

// TalosOperationSpec says what to do and to which machines.
type TalosOperationSpec struct {
	// clusterName is the TalosCluster in this namespace the operation acts on.
	ClusterName string
	// type of the operation.
	Type OperationType
	// machines the operation acts on; empty means what the type implies
	// (every machine, or the control planes for etcd operations).
	Machines []string
	// talosUpgrade parameters; required for talos-upgrade, forbidden otherwise.
	TalosUpgrade *TalosUpgradeParameters
	// kubernetesUpgrade parameters; required for kubernetes-upgrade, forbidden otherwise.
	KubernetesUpgrade *KubernetesUpgradeParameters
	// nodeReset parameters; allowed for node-reset only.
	NodeReset *NodeResetParameters
	// etcdRestore parameters; required for etcd-restore, forbidden otherwise.
	EtcdRestore *EtcdRestoreParameters
	// reboot parameters; allowed for reboot only.
	Reboot *RebootParameters
	// maxUnavailable is how many workers a talos-upgrade, a reboot, a
	// node-shutdown or a shutdown takes away at once; control planes always
	// go one at a time. Default 1.
	MaxUnavailable *int32
	// NodeShutdown parameters; node-shutdown only.
	NodeShutdown *NodeShutdownParameters
	CARotation   *CARotationParameters
	KeyRotation  *KeyRotationParameters
}

// RotatableKey names a key of a cluster that a key-rotation replaces; see
// v1alpha1.
type RotatableKey string

// The keys a key-rotation replaces; see v1alpha1.
const (
	KeyDiskEncryption    RotatableKey = "diskEncryption"
	KeyServiceAccount    RotatableKey = "serviceAccount"
	KeySecretsEncryption RotatableKey = "secretsEncryption"
)

// KeyRotationParameters say which of the cluster's keys a key-rotation
// replaces.
type KeyRotationParameters struct {
	Keys                      []RotatableKey
	DryRun                    bool
	ServiceAccountGracePeriod *metav1.Duration
}

// CARotationParameters say which of the cluster's CAs a ca-rotation replaces.
type CARotationParameters struct {
	Talos      *bool
	Kubernetes *bool
	DryRun     bool
}

// NodeShutdownParameters are the inputs of a node-shutdown.
type NodeShutdownParameters struct {
	// Force skips cordoning and draining the node.
	Force bool
}

// RebootParameters are the inputs of a reboot.
type RebootParameters struct {
	// Force skips draining and the graceful stop of services.
	Force bool
}

// TalosUpgradeParameters are the inputs of a Talos upgrade.
type TalosUpgradeParameters struct {
	// version to upgrade to, as a semantic version with a leading v.
	Version string
	// stage the upgrade to apply at the next reboot.
	Stage bool
}

// KubernetesUpgradeParameters are the inputs of a Kubernetes upgrade.
type KubernetesUpgradeParameters struct {
	// version to upgrade to, as a semantic version with a leading v.
	Version string
}

// NodeResetParameters are the inputs of a node reset.
type NodeResetParameters struct {
	// graceful drains the node first and, when its system disk is wiped,
	// has a control plane leave etcd; defaults to true.
	Graceful *bool
	// wipe selects the disks to wipe; defaults to all.
	Wipe WipeMode
	// userDisks are the user disks to wipe, for wipe all or user-disks.
	UserDisks []string
}

// EtcdRestoreParameters are the inputs of an etcd restore.
type EtcdRestoreParameters struct {
	// backup is the succeeded TalosBackup of the same cluster, in this
	// namespace, whose etcd snapshot is restored.
	Backup string
	// identitySecret names a Secret in this namespace whose "identity" key
	// holds an age identity of one of the backup's recipients.
	IdentitySecret string
}

// OperationPhase is where an operation is in its life.
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
	Phase OperationPhase
	// observedGeneration is the generation the status describes.
	ObservedGeneration int64
	// startedBy is the user who started the operation.
	StartedBy string
	// startedAt is when it was started.
	StartedAt *metav1.Time
	// completedAt is when it succeeded or failed.
	CompletedAt *metav1.Time
	// steps are the progress records: one per machine, or for a
	// kubernetes-upgrade one per machine and component, in the order they run.
	Steps []OperationStep
	// conditions of the operation.
	Conditions []metav1.Condition
}

// OperationStep is the progress of an operation on one machine.
type OperationStep struct {
	// machine is the TalosMachine name.
	Machine string
	// phase of this step.
	Phase OperationPhase
	// message says what happened, for people.
	Message string
	// startedAt is when the step began.
	StartedAt *metav1.Time
	// completedAt is when the step ended.
	CompletedAt *metav1.Time
	// bootID is the node's boot ID before the step rebooted it: a node that
	// answers with another one has rebooted.
	BootID string
	// component is the Kubernetes component a kubernetes-upgrade step
	// upgrades on the machine.
	Component KubernetesComponent
	// action is what an etcd-restore step does on the machine.
	Action StepAction
	// acceptedAt is when the node answered a node-reset's call.
	AcceptedAt *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosOperationList is a list of TalosOperation objects.
type TalosOperationList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosOperation
}
