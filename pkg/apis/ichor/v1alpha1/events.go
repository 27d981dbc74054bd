package v1alpha1

import corev1 "k8s.io/api/core/v1"

// EventReason is the reason of an Event Ichor records, which users select
// by (kubectl get events --field-selector reason=StepFailed): API surface,
// like a condition's reason. Every reason Ichor records is in the table
// below, with its type, the kinds it is recorded on and what it means;
// pkg/events records Events only through it, and docs/reference/events.md
// is generated from it (hack/docgen).
//
// An Event that reports a condition's reason (an answered credential
// request, a refused secrets bundle, a reclaim's progress) takes that
// reason's constant from conditions.go; the other reasons are defined
// here. Each string is defined once.
type EventReason string

// Reasons of the Events on a TalosOperation.
const (
	EventOperationRunning     EventReason = "Running"
	EventOperationWaiting     EventReason = "Waiting"
	EventStepStarted          EventReason = "StepStarted"
	EventStepSucceeded        EventReason = "StepSucceeded"
	EventStepFailed           EventReason = OperationReasonStepFailed
	EventOperationSucceeded   EventReason = "Succeeded"
	EventOperationFailed      EventReason = "Failed"
	EventOperationStopped     EventReason = OperationReasonStopped
	EventOverrideUsed         EventReason = "OverrideUsed"
	EventKubernetesVersion    EventReason = "KubernetesVersionFollowed"
	EventKubeProxyApplied     EventReason = "KubeProxyApplied"
	EventDiskKeyRotationPhase EventReason = "DiskKeyRotationPhase"
	EventDiskKeyRotated       EventReason = "DiskKeyRotated"
	EventCARotationPhase      EventReason = "CARotationPhase"
	EventCARotated            EventReason = "CARotated"
	EventKeyRotationPhase     EventReason = "KeyRotationPhase"
	EventSecretsRewritten     EventReason = "SecretsRewritten"
	EventKeysRotated          EventReason = "KeysRotated"
)

// Reasons of the Events on a TalosMachine.
const (
	EventCertificatePinned    EventReason = "CertificatePinned"
	EventCertificateMismatch  EventReason = MachineReasonCertificateMismatch
	EventUnreachable          EventReason = "Unreachable"
	EventReachable            EventReason = "Reachable"
	EventAddressInUse         EventReason = MachineReasonAddressInUse
	EventDiscovered           EventReason = "Discovered"
	EventSeenElsewhere        EventReason = "SeenAtAnotherAddress"
	EventConfigApplied        EventReason = "ConfigApplied"
	EventConfigFailed         EventReason = "ConfigFailed"
	EventSecureBootRequired   EventReason = MachineReasonSecureBootRequired
	EventMachineReady         EventReason = "MachineReady"
	EventResettingNode        EventReason = "ResettingNode"
	EventNodeReset            EventReason = "NodeReset"
	EventCertificateRepinned  EventReason = "CertificateRepinned"
	EventPoweredOff           EventReason = "PoweredOff"
	EventKubeletServingDenied EventReason = "KubeletServingDenied"
)

// Reasons of the Events on a TalosCluster.
const (
	EventBootstrapped           EventReason = ClusterReasonBootstrapped
	EventBootstrapFailed        EventReason = ClusterReasonBootstrapFailed
	EventControllerAccess       EventReason = "ControllerAccessInstalled"
	EventClusterReady           EventReason = "ClusterReady"
	EventClusterDegraded        EventReason = "ClusterDegraded"
	EventBootstrapTokenEnabled  EventReason = "BootstrapTokenEnabled"
	EventBootstrapTokenDisabled EventReason = "BootstrapTokenDisabled"
	EventSecretsGenerated       EventReason = "SecretsGenerated"
	EventSecretsDigestRecorded  EventReason = "SecretsDigestRecorded"
	EventBackupScheduled        EventReason = "BackupScheduled"
	EventBackupPruned           EventReason = "BackupPruned"
	EventBackupNameTaken        EventReason = "BackupNameTaken"
)

// Reasons of the Events on a TalosBackup.
const (
	EventBackupStarted      EventReason = "BackupStarted"
	EventBackupSucceeded    EventReason = "BackupSucceeded"
	EventBackupFailed       EventReason = "BackupFailed"
	EventBackupFilesDeleted EventReason = "BackupFilesDeleted"
	EventBackupFilesKept    EventReason = "BackupFilesKept"
	EventSnapshotUploaded   EventReason = "SnapshotUploaded"
)

// Reasons of the Events on a MachineReclaim, beside the condition reasons
// DeleteRefused, NotThisMachine and WaitingForApproval.
const (
	EventReclaimResetting   EventReason = ReclaimReasonResetting
	EventReclaimApproved    EventReason = "Approved"
	EventReclaimed          EventReason = "Reclaimed"
	EventReclaimFailed      EventReason = "ReclaimFailed"
	EventTalosconfigDeleted EventReason = "TalosconfigDeleted"
)

// Reasons of the Events ichor-apiserver records for an action or a
// download, naming the user.
const (
	EventStarted         EventReason = ConditionStarted
	EventOverrideGranted EventReason = "OverrideGranted"
	EventDownloaded      EventReason = "Downloaded"
	EventSignedIn        EventReason = "SignedIn"
	EventPasswordChanged EventReason = "PasswordChanged"
)

// eventReason is one row of the table: a reason, the type of its Events,
// the kinds they are recorded on, and what happened (for a Warning, what
// to do about it). It is no API type.
// +k8s:openapi-gen=false
// +k8s:deepcopy-gen=false
type eventReason struct {
	Reason EventReason
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Kinds are the kinds of the objects the Events are about (regarding).
	Kinds []string
	// Doc is one line: what happened, and for a Warning what to do.
	Doc string
}

// Kinds the Events are about, as the table names them.
const (
	kindCluster           = "TalosCluster"
	kindMachine           = "TalosMachine"
	kindOperation         = "TalosOperation"
	kindBackup            = "TalosBackup"
	kindReclaim           = "MachineReclaim"
	kindCredentialRequest = "TalosCredentialRequest"
	kindConfigPatch       = "TalosConfigPatch"
	kindUser              = "IchorUser"
)

const (
	normal  = corev1.EventTypeNormal
	warning = corev1.EventTypeWarning
)

// eventReasons is the table of every reason Ichor records.
var eventReasons = []eventReason{
	// TalosOperation, ichor-controller.
	{EventOperationWaiting, normal, []string{kindOperation},
		"The operation waits before its first step (for another operation, the cluster's health or its disruption budget); the message says for what."},
	{EventOperationRunning, normal, []string{kindOperation},
		"The operation began, with the steps the message lists."},
	{EventStepStarted, normal, []string{kindOperation},
		"A step began on the machine the message names."},
	{EventStepSucceeded, normal, []string{kindOperation},
		"A step ended well on the machine the message names."},
	{EventStepFailed, warning, []string{kindOperation},
		"A step failed, and the operation with it: the rollout stops there. Read the message and the machine's conditions, fix the cause, then start the operation again."},
	{EventOperationSucceeded, normal, []string{kindOperation},
		"Every step of the operation succeeded."},
	{EventOperationFailed, warning, []string{kindOperation},
		"The operation ended without finishing (a failed step, a refused precheck, a cluster or target gone): the message says why and how far it got; fix that and start a new one."},
	{EventOperationStopped, normal, []string{kindOperation},
		"The operation was deleted while it ran: it stopped after the step in flight."},
	{EventOverrideUsed, warning, []string{kindOperation, kindCluster},
		"A change went past a safety check (cluster health, a Talos downgrade, a bootstrap that does not wait for every control plane) because an admin granted an override; the message names them. Check that the cluster is as intended."},
	{EventKubernetesVersion, normal, []string{kindOperation},
		"A kubernetes-upgrade moved its cluster's spec.kubernetesVersion to the version it installed."},
	{EventKubeProxyApplied, normal, []string{kindOperation},
		"A kubernetes-upgrade applied kube-proxy's DaemonSet from a control plane's bootstrap manifest."},
	{EventDiskKeyRotationPhase, normal, []string{kindCluster},
		"A disk-key-rotation moved into the phase the message names."},
	{EventDiskKeyRotated, normal, []string{kindCluster},
		"A disk-key-rotation ended: every machine opens its encrypted volumes with the new key alone."},
	{EventCARotationPhase, normal, []string{kindCluster},
		"A ca-rotation moved into the phase the message names."},
	{EventCARotated, normal, []string{kindCluster},
		"A ca-rotation ended: every node trusts the new CAs alone; an admin downloads the new credentials once (talosclusters/credentials)."},
	{EventKeyRotationPhase, normal, []string{kindCluster},
		"A key-rotation of the service-account or secrets-encryption key moved into the phase the message names."},
	{EventSecretsRewritten, normal, []string{kindCluster},
		"A key-rotation of the secrets-encryption key wrote every Secret again, encrypting it with the new key, before the old key is dropped."},
	{EventKeysRotated, normal, []string{kindCluster},
		"A key-rotation of the service-account or secrets-encryption key ended: the control planes sign and encrypt with the new keys alone, and the secrets bundle holds them."},

	// TalosMachine, ichor-controller.
	{EventDiscovered, normal, []string{kindMachine},
		"The provisioning-network scan found a node in maintenance mode and made this TalosMachine for it; approve or reject it."},
	{EventSeenElsewhere, warning, []string{kindMachine},
		"A node with this machine's identity answered in maintenance mode at another address than spec.address: if the node moved, correct spec.address; if not, find out what answers there."},
	{EventCertificatePinned, normal, []string{kindMachine},
		"The node's maintenance certificate was pinned at first contact (or as spec.expectedFingerprint said); the machine awaits approval: compare the fingerprint with the node's console."},
	{EventCertificateMismatch, warning, []string{kindMachine},
		"The node presents another certificate than the pinned one, and nothing is sent to it: find out what answers at the address before anything else."},
	{EventUnreachable, warning, []string{kindMachine},
		"The node's Talos API stopped answering (the controller's log says why): check that the node runs and that ichor-controller reaches its address."},
	{EventReachable, normal, []string{kindMachine},
		"The node's Talos API answers again."},
	{EventAddressInUse, warning, []string{kindMachine},
		"Another TalosMachine, in any namespace, has this machine's address first, so the node is not contacted: delete one of the two, or correct the address."},
	{EventConfigApplied, normal, []string{kindMachine},
		"The node was sent its rendered config (installed in maintenance mode, or applied), or found installed already."},
	{EventConfigFailed, warning, []string{kindMachine},
		"The config could not be rendered, needs a node-reset, or the node did not take it: read the message, then fix the cluster, the machine or a patch, or reset the node."},
	{EventSecureBootRequired, warning, []string{kindMachine},
		"The cluster requires SecureBoot and the node says it did not boot with it; nothing was sent: boot it with SecureBoot, or change the cluster's requirement."},
	{EventMachineReady, normal, []string{kindMachine},
		"The node runs its config and is ready."},
	{EventResettingNode, normal, []string{kindMachine},
		"The TalosMachine was deleted: its node is reset (gracefully: it leaves etcd and is drained first)."},
	{EventNodeReset, normal, []string{kindMachine, kindReclaim},
		"The node is back in maintenance mode after its reset."},
	{EventCertificateRepinned, normal, []string{kindMachine},
		"A node-reset wiped the node, and the certificate its new maintenance mode presents was pinned; its config is installed again."},
	{EventPoweredOff, normal, []string{kindMachine},
		"A shutdown powered the node off; it stays off until it is powered on (its BMC, cloud console or power button)."},
	{EventKubeletServingDenied, warning, []string{kindMachine},
		"A kubelet serving certificate request for the node was denied; the message says which rule it broke: find out what asked, or why the kubelet asks for names the node's Talos API does not report."},

	// TalosCluster, ichor-controller.
	{EventSecretsGenerated, normal, []string{kindCluster},
		"The cluster's secrets bundle was generated into its Secret."},
	{EventSecretsDigestRecorded, normal, []string{kindCluster},
		"The SHA-256 of a bundle generated before digests were recorded was recorded: from now on only that bundle is used."},
	{ClusterReasonSecretNotFound, warning, []string{kindCluster},
		"The Secret spec.secretsRef names does not exist: create it, or correct spec.secretsRef."},
	{ClusterReasonSecretsForbidden, warning, []string{kindCluster},
		"ichor-controller may not read Secrets in the cluster's namespace: an admin grants that per namespace."},
	{ClusterReasonSecretConflict, warning, []string{kindCluster},
		"A Secret ichor-controller would write holds something else; it is neither used nor overwritten: move it away, or name it in spec.secretsRef if it is the bundle."},
	{ClusterReasonInvalidBundle, warning, []string{kindCluster},
		"The secrets bundle (or a CA rotation's Secret) does not parse: restore it from a copy."},
	{ClusterReasonSecretDigestMismatch, warning, []string{kindCluster},
		"A Secret ichor-controller generated no longer holds what it recorded the SHA-256 of; it is neither used nor overwritten: restore it from a copy."},
	{EventBootstrapped, normal, []string{kindCluster},
		"etcd was bootstrapped on the first control plane."},
	{EventBootstrapFailed, warning, []string{kindCluster},
		"Bootstrapping etcd failed; it is tried again: read the message and the control plane's conditions."},
	{EventControllerAccess, normal, []string{kindCluster},
		"ichor-controller's roles were bound in the cluster's Kubernetes."},
	{EventClusterReady, normal, []string{kindCluster},
		"The cluster became Ready."},
	{EventClusterDegraded, warning, []string{kindCluster},
		"The cluster is no longer Ready: the message repeats its Ready condition; look at the conditions and machines it names."},
	{EventBootstrapTokenEnabled, normal, []string{kindCluster},
		"The cluster's bootstrap token authenticates, while machines join or kubelets bootstrap from a new CA."},
	{EventBootstrapTokenDisabled, normal, []string{kindCluster},
		"Every machine has a Node and no kubelet bootstraps: the bootstrap token no longer authenticates."},
	{EventBackupScheduled, normal, []string{kindCluster},
		"The backup schedule created a TalosBackup (the related object)."},
	{EventBackupPruned, normal, []string{kindCluster},
		"The backup schedule deleted a TalosBackup its retention no longer keeps."},
	{EventBackupNameTaken, warning, []string{kindCluster},
		"A TalosBackup created by hand holds the name of a scheduled run, which gets a generated name instead: rename your own backups."},

	// TalosBackup, ichor-controller.
	{EventBackupStarted, normal, []string{kindBackup},
		"The backup began (or began receiving its upload)."},
	{EventBackupSucceeded, normal, []string{kindBackup},
		"The backup's files were written; the message says where."},
	{EventSnapshotUploaded, normal, []string{kindBackup},
		"An uploaded etcd snapshot was written; the message names the uploader."},
	{EventBackupFailed, warning, []string{kindBackup, kindCluster},
		"The backup (or an upload) failed, or a deleted upload left files behind: the message and the backup's Succeeded condition say why (credentials, target, snapshot)."},
	{EventBackupFilesDeleted, normal, []string{kindBackup},
		"The files of a deleted backup were deleted from its target."},
	{EventBackupFilesKept, warning, []string{kindBackup},
		"A backup was deleted without its files, as annotated: they stay at the location the message gives; delete them there when no longer wanted."},

	// MachineReclaim, ichor-controller.
	{ReclaimReasonDeleteRefused, warning, []string{kindReclaim},
		"Deleting the old TalosMachine is refused, for its cluster's etcd quorum; retried: an admin's override of the check on that machine lets the reclaim go on."},
	{EventReclaimResetting, normal, []string{kindReclaim},
		"The old TalosMachine was deleted, or the node accepted the reset."},
	{EventTalosconfigDeleted, normal, []string{kindReclaim},
		"The talosconfig Secret the reset used was deleted: it was for that reset only."},
	{ReclaimReasonNotThisMachine, warning, []string{kindReclaim},
		"The node answering at the address is not the one reset (another system UUID, or not the expected certificate); nothing is sent to it: find out what answers there."},
	{ReclaimReasonWaitingForApproval, normal, []string{kindReclaim},
		"The new TalosMachine is the node reset but is not approved on the reclaim's behalf (a control plane, or no system UUID on record): an admin approves it."},
	{EventReclaimApproved, normal, []string{kindReclaim},
		"The new TalosMachine was approved, by the reclaim or by someone."},
	{EventReclaimed, normal, []string{kindReclaim},
		"The node is Ready in its new cluster."},
	{EventReclaimFailed, warning, []string{kindReclaim},
		"The reclaim stopped: its Succeeded condition says why; fix that and create a new reclaim."},

	// TalosCredentialRequest, ichor-controller: the reason of its answer.
	{CredentialRequestReasonIssued, normal, []string{kindCredentialRequest},
		"The credential was issued into the request's status."},
	{CredentialRequestReasonUnknownPurpose, warning, []string{kindCredentialRequest},
		"Denied: the purpose grants no Talos role."},
	{CredentialRequestReasonNoRequester, warning, []string{kindCredentialRequest},
		"Denied: the request names no authenticated requester."},
	{CredentialRequestReasonClusterNotFound, warning, []string{kindCredentialRequest},
		"Denied: the TalosCluster does not exist."},
	{CredentialRequestReasonMachineNotFound, warning, []string{kindCredentialRequest},
		"Denied: the TalosMachine is not an approved machine of the cluster."},
	{CredentialRequestReasonBadPublicKey, warning, []string{kindCredentialRequest},
		"Denied: the public key does not parse or is not allowed."},
	{CredentialRequestReasonNoNewCredentials, warning, []string{kindCredentialRequest},
		"Denied: no CA rotation of the cluster has completed, so there are no new credentials."},
	{CredentialRequestReasonAlreadyServed, warning, []string{kindCredentialRequest},
		"Denied: the credentials of the last CA rotation were handed out already; they are served once."},

	// ichor-apiserver: actions and downloads, naming the user.
	{EventStarted, normal, []string{kindOperation, kindReclaim},
		"Someone started the operation or the reclaim (its start or reclaim action); the message names them."},
	{EventOverrideGranted, warning, []string{kindCluster, kindMachine, kindConfigPatch},
		"An admin let the next change of the object go past a safety check; the message names them, the check and their reason."},
	{EventDownloaded, normal, []string{kindMachine, kindCluster},
		"Someone downloaded a support bundle, a packet capture, an etcd snapshot, a talosconfig or credentials; the message names them."},
	{EventSignedIn, normal, []string{kindUser},
		"The Ichor user signed in with a password."},
	{EventPasswordChanged, normal, []string{kindUser},
		"Someone set the Ichor user's password; the message names them."},
}

// eventReasonIndex finds a reason's row.
var eventReasonIndex = func() map[EventReason]*eventReason {
	m := make(map[EventReason]*eventReason, len(eventReasons))
	for i := range eventReasons {
		m[eventReasons[i].Reason] = &eventReasons[i]
	}
	return m
}()

// EventReasons are every reason in the table, in its order.
func EventReasons() []EventReason {
	out := make([]EventReason, len(eventReasons))
	for i, e := range eventReasons {
		out[i] = e.Reason
	}
	return out
}

// Known says whether r is in the table.
func (r EventReason) Known() bool { return eventReasonIndex[r] != nil }

// Type is the type of r's Events, corev1.EventTypeNormal or
// corev1.EventTypeWarning; "" for a reason not in the table.
func (r EventReason) Type() string {
	if e := eventReasonIndex[r]; e != nil {
		return e.Type
	}
	return ""
}

// Kinds are the kinds of the objects r's Events are about.
func (r EventReason) Kinds() []string {
	if e := eventReasonIndex[r]; e != nil {
		return append([]string(nil), e.Kinds...)
	}
	return nil
}

// Doc says in one line what r's Events mean, and for a Warning what to do.
func (r EventReason) Doc() string {
	if e := eventReasonIndex[r]; e != nil {
		return e.Doc
	}
	return ""
}
