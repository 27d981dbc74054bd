package v1alpha1

// Condition types and reasons of every kind, defined once for the server,
// the controllers and the clients (CLI, UI, tests) that read them. Each
// condition type has one writer: the table of status writers
// (statuswriters.go) says which.

// Condition types of a TalosMachine.
const (
	// MachineConditionReachable says whether the node's Talos API answered at the
	// last contact, presenting the certificate it should.
	MachineConditionReachable = "Reachable"
	// MachineConditionCertificateVerified says whether the node presents the
	// pinned maintenance certificate. Configuration is only ever sent when
	// it is True.
	MachineConditionCertificateVerified = "CertificateVerified"
	// MachineConditionApproved mirrors status.approval: an operator's decision to
	// admit the machine into its cluster.
	MachineConditionApproved = "Approved"
	// MachineConditionConfigApplied says whether the node was sent the config
	// rendered from the current cluster, machine and patches.
	MachineConditionConfigApplied = "ConfigApplied"
	// MachineConditionReady says whether the node runs that config and reports
	// itself ready.
	MachineConditionReady = "Ready"
)

// Reasons of the conditions of a TalosMachine.
const (
	MachineReasonContacted            = "Contacted"
	MachineReasonConnectionFailed     = "ConnectionFailed"
	MachineReasonCertificateMismatch  = "CertificateMismatch"
	MachineReasonPinnedOnFirstContact = "PinnedOnFirstContact"
	MachineReasonMatchesPin           = "MatchesPin"
	// MachineReasonLeftMaintenance: the node was installed and answers with its
	// cluster's certificate.
	MachineReasonLeftMaintenance = "LeftMaintenance"
	// MachineReasonPinnedAfterReset: a node-reset wiped the node's system
	// disk, and the certificate its new maintenance mode presents at the
	// machine's address, with the machine's system UUID, is pinned.
	MachineReasonPinnedAfterReset = "PinnedAfterReset"
	// MachineReasonMatchesExpectedFingerprint: the pin is the certificate the user
	// expected (spec.expectedFingerprint), not trust on first use.
	MachineReasonMatchesExpectedFingerprint = "MatchesExpectedFingerprint"
	MachineReasonNotContacted               = "NotContacted"
	// MachineReasonAddressInUse: another TalosMachine, in any namespace, has
	// the machine's address first; the node is not contacted.
	MachineReasonAddressInUse     = "AddressInUse"
	MachineReasonAwaitingApproval = "AwaitingApproval"
	MachineReasonApproved         = "Approved"
	MachineReasonRejected         = "Rejected"
	MachineReasonInstalled        = "Installed"
	MachineReasonApplied          = "Applied"
	MachineReasonUpToDate         = "UpToDate"
	MachineReasonClusterNotFound  = "ClusterNotFound"
	MachineReasonSecretsNotReady  = "SecretsNotReady"
	MachineReasonRenderFailed     = "RenderFailed"
	MachineReasonApplyFailed      = "ApplyFailed"
	// MachineReasonResetRequired: the new config changes what Talos sets
	// only at install (a system volume's encryption); the node keeps its
	// config until a node-reset wipes it and installs the new one.
	MachineReasonResetRequired = "ResetRequired"
	// MachineReasonSecureBootRequired: the cluster requires machines to
	// boot with SecureBoot and this node says it did not; nothing was sent.
	MachineReasonSecureBootRequired = "SecureBootRequired"
	MachineReasonWaitingForRollout  = "WaitingForRollout"
	MachineReasonRunning            = "Running"
	MachineReasonBooting            = "Booting"
	MachineReasonRebooting          = "Rebooting"
	// MachineReasonAPIServerRestarting: the control plane took a change
	// that restarts its kube-apiserver, which does not serve it yet; the
	// machine holds its cluster's disruption budget until it does.
	MachineReasonAPIServerRestarting = "APIServerRestarting"
	MachineReasonNotReachable        = "NotReachable"
	MachineReasonResetting           = "Resetting"
	// MachineReasonShuttingDown: the node is shutting down (Talos drains
	// it first), and stays off until it is powered on.
	MachineReasonShuttingDown               = "ShuttingDown"
	MachineReasonWaitingForDisruptionBudget = "WaitingForDisruptionBudget"
	MachineReasonQuorumAtRisk               = "QuorumAtRisk"
)

// Condition types of a TalosCluster.
const (
	// ClusterConditionMachinesReady: every approved machine runs its config and is ready.
	ClusterConditionMachinesReady = "MachinesReady"
	// ClusterConditionBootstrapped: etcd was bootstrapped on the first control plane.
	ClusterConditionBootstrapped = "Bootstrapped"
	// ClusterConditionEtcdHealthy: every control plane is a voting etcd member.
	ClusterConditionEtcdHealthy = "EtcdHealthy"
	// ClusterConditionKubernetesAPIReachable: the cluster's Kubernetes API answers
	// ichor-controller's own identity.
	ClusterConditionKubernetesAPIReachable = "KubernetesAPIReachable"
	// ClusterConditionNodesReady: every approved machine has a Ready Node in the
	// cluster's Kubernetes.
	ClusterConditionNodesReady = "NodesReady"
	// ClusterConditionBootstrapTokenEnabled: the cluster's bootstrap token
	// authenticates, because a machine is joining; False once every machine
	// has a Node. Not part of Ready.
	ClusterConditionBootstrapTokenEnabled = "BootstrapTokenEnabled"
	// ClusterConditionReady: all of the above but BootstrapTokenEnabled.
	ClusterConditionReady = "Ready"
	// ClusterConditionSecretsReady: the cluster's secrets bundle exists and
	// parses, generated or named by spec.secretsRef.
	ClusterConditionSecretsReady = "SecretsReady"
	// ClusterConditionKubeletServingCertificates: every machine has an
	// unexpired kubelet serving certificate recorded. Removed when the
	// option is off.
	ClusterConditionKubeletServingCertificates = "KubeletServingCertificates"
	// ClusterConditionKubeletServingVerified is the condition that,
	// while True, has control planes rendered with kube-apiserver verifying
	// kubelets against the cluster CA. The kubelet serving approver sets it once
	// every machine had a CA-signed serving certificate, and keeps it (a latch).
	ClusterConditionKubeletServingVerified = "KubeletServingVerified"
	// ClusterConditionConfigContract: every machine runs a config rendered
	// for the cluster's version contract (spec.talosVersion), in its layout;
	// False while a move of the contract rolls out. Not part of Ready.
	ClusterConditionConfigContract = "ConfigContract"
	// ClusterConditionImageReady: the cluster's installer image is known:
	// from the installation's image factory for the cluster's schematic, or
	// ichor-controller's --install-image. Not part of Ready.
	ClusterConditionImageReady = "ImageReady"
)

// Reasons of the conditions of a TalosCluster.
const (
	ClusterReasonAllReady               = "AllReady"
	ClusterReasonMachinesNotReady       = "MachinesNotReady"
	ClusterReasonNoControlPlane         = "NoControlPlane"
	ClusterReasonBootstrapped           = "Bootstrapped"
	ClusterReasonWaitingForControlPlane = "WaitingForControlPlane"
	ClusterReasonBootstrapFailed        = "BootstrapFailed"
	ClusterReasonMembersHealthy         = "MembersHealthy"
	ClusterReasonMembersMissing         = "MembersMissing"
	ClusterReasonEtcdUnreadable         = "EtcdUnreadable"
	ClusterReasonReachable              = "Reachable"
	ClusterReasonUnreachable            = "Unreachable"
	ClusterReasonNotBootstrapped        = "NotBootstrapped"
	ClusterReasonNodesReady             = "NodesReady"
	ClusterReasonNodesNotReady          = "NodesNotReady"
	ClusterReasonReady                  = "Ready"
	ClusterReasonNotReady               = "NotReady"
	ClusterReasonSecretsNotReady        = "SecretsNotReady"
	ClusterReasonAccessInstallFailed    = "AccessInstallFailed"
	ClusterReasonMachinesJoining        = "MachinesJoining"
	// ClusterReasonKubeletsRebootstrapping: a Kubernetes CA rotation has
	// the kubelets bootstrap client certificates from the new CA.
	ClusterReasonKubeletsRebootstrapping = "KubeletsRebootstrapping"
	ClusterReasonAllMachinesJoined       = "AllMachinesJoined"
	ClusterReasonTokenSecretMissing      = "TokenSecretMissing"
	ClusterReasonTokenUpdateFailed       = "TokenUpdateFailed"
	ClusterReasonGenerated               = "Generated"
	ClusterReasonProvided                = "Provided"
	ClusterReasonSecretNotFound          = "SecretNotFound"
	ClusterReasonSecretConflict          = "SecretConflict"
	// ClusterReasonSecretDigestMismatch: a Secret that ichor-controller
	// generated (the bundle, or a rotation's new CAs) no longer holds what
	// it recorded the SHA-256 of; it is neither used nor overwritten.
	ClusterReasonSecretDigestMismatch = "SecretDigestMismatch"
	ClusterReasonInvalidBundle        = "InvalidBundle"
	// ClusterReasonSecretsForbidden: ichor-controller may not read Secrets in the
	// cluster's namespace; an admin grants that per namespace.
	ClusterReasonSecretsForbidden       = "SecretsForbidden"
	ClusterReasonAllIssued              = "AllIssued"
	ClusterReasonWaitingForCertificates = "WaitingForCertificates"
	ClusterReasonKubernetesUnreachable  = "KubernetesUnreachable"
	// ClusterReasonContractCurrent: every machine's config is of the contract.
	ClusterReasonContractCurrent = "ContractCurrent"
	// ClusterReasonContractMoving: machines still run a config of another
	// contract; the message says how many and how the move rolls out.
	ClusterReasonContractMoving = "ContractMoving"
	// ClusterReasonFromFactory: the installer comes from the image factory.
	ClusterReasonFromFactory = "FromFactory"
	// ClusterReasonFromInstallImage: the installer is --install-image (no factory).
	ClusterReasonFromInstallImage = "FromInstallImage"
	// ClusterReasonNoImageFactory: the cluster names a schematic and the
	// installation has no image factory to build it.
	ClusterReasonNoImageFactory = "NoImageFactory"
)

// Condition types of a TalosConfigPatch.
const (
	// PatchConditionValid says whether the patch renders into every machine it targets.
	PatchConditionValid = "Valid"
	// PatchConditionApplied says whether every targeted machine runs a config
	// with the patch's current generation.
	PatchConditionApplied = "Applied"
)

// Reasons of the conditions of a TalosConfigPatch.
const (
	PatchReasonRenders    = "Renders"
	PatchReasonDisabled   = "Disabled"
	PatchReasonNoTargets  = "NoTargets"
	PatchReasonAllApplied = "AllApplied"
	PatchReasonRollingOut = "RollingOut"
	PatchReasonBlocked    = "Blocked"
	// PatchReasonResetRequired: the patch changes what Talos sets only at
	// install (a system volume's encryption); installed machines take it
	// after a node-reset.
	PatchReasonResetRequired   = "ResetRequired"
	PatchReasonClusterNotFound = "ClusterNotFound"
	PatchReasonSecretsNotReady = "SecretsNotReady"
)

// Condition types of an IchorInstallation.
const (
	// InstallationConditionProvisioningNetworksScanned reports the last scan.
	InstallationConditionProvisioningNetworksScanned = "ProvisioningNetworksScanned"
)

// Reasons of the conditions of an IchorInstallation.
const (
	InstallationReasonScanned      = "Scanned"
	InstallationReasonTruncated    = "Truncated"
	InstallationReasonCreateFailed = "CreateFailed"
)

// Condition types of a TalosCredentialRequest's answer: exactly one becomes True.
const (
	// CredentialRequestIssued is True once status holds the certificate.
	CredentialRequestIssued = "Issued"
	// CredentialRequestDenied is True when the request will not be answered, with the reason.
	CredentialRequestDenied = "Denied"
)

// Reasons of the conditions of a TalosCredentialRequest.
const (
	CredentialRequestReasonIssued          = "Issued"
	CredentialRequestReasonUnknownPurpose  = "UnknownPurpose"
	CredentialRequestReasonNoRequester     = "NoRequester"
	CredentialRequestReasonClusterNotFound = "ClusterNotFound"
	CredentialRequestReasonMachineNotFound = "MachineNotFound"
	CredentialRequestReasonBadPublicKey    = "BadPublicKey"
	// CredentialRequestReasonNoNewCredentials: the credentials purpose
	// before any CA rotation of the cluster completed.
	CredentialRequestReasonNoNewCredentials = "NoNewCredentials"
	// CredentialRequestReasonAlreadyServed: the credentials of the last
	// rotation were handed out already; they are served once.
	CredentialRequestReasonAlreadyServed = "AlreadyServed"
)

// Condition types of a TalosOperation, beside Started.
const (
	// OperationConditionProgressing is True while a step runs, and False
	// while the operation waits (for another operation, the cluster's
	// health, the disruption budget) or has ended.
	OperationConditionProgressing = "Progressing"
	// OperationConditionSucceeded is set when the operation ends: True when
	// every step succeeded, False when one failed or it could not run.
	// `kubectl wait --for=condition=Succeeded` waits for success.
	OperationConditionSucceeded = "Succeeded"
	// OperationConditionHealthOverridden is True on an operation an admin let
	// start on a cluster that was not healthy (the ClusterHealth check of
	// talosclusters/override): its steps do not wait for other machines to be
	// Ready. etcd's quorum is still checked before each control plane.
	OperationConditionHealthOverridden = "ClusterHealthOverridden"
	// OperationConditionDowngradeOverridden is True on a talos-upgrade an
	// admin let take machines to an older Talos than they run (the
	// TalosDowngrade check of talosclusters/override).
	OperationConditionDowngradeOverridden = "TalosDowngradeOverridden"
)

// Reasons of the conditions of a TalosOperation.
const (
	OperationReasonStepRunning         = "StepRunning"
	OperationReasonWaitingForOperation = "WaitingForOperation"
	OperationReasonClusterNotHealthy   = "ClusterNotHealthy"
	OperationReasonWaitingForBudget    = "WaitingForDisruptionBudget"
	OperationReasonClusterNotFound     = "ClusterNotFound"
	OperationReasonClusterPaused       = "ClusterPaused"
	OperationReasonInvalidTarget       = "InvalidTarget"
	OperationReasonNotSupported        = "NotSupported"
	OperationReasonAllStepsSucceeded   = "AllStepsSucceeded"
	OperationReasonStepFailed          = "StepFailed"
	OperationReasonStopped             = "Stopped"
	OperationReasonCompleted           = "Completed"
	OperationReasonOverridden          = "Overridden"
	OperationReasonDraining            = "Draining"
	// OperationReasonKeyGracePeriod: a key rotation waits for the kubelets
	// to renew pods' service-account tokens before it drops the old key.
	OperationReasonKeyGracePeriod = "KeyGracePeriod"
	// OperationReasonPrecheckFailed: a check before the first step refused
	// the operation (an upgrade path Kubernetes or Talos refuses, objects of
	// an API the new version removes).
	OperationReasonPrecheckFailed = "PrecheckFailed"
)

// Condition types of a MachineReclaim, beside Started.
const (
	// ReclaimConditionProgressing says what a running reclaim does or waits
	// for; False once it ended.
	ReclaimConditionProgressing = "Progressing"
	// ReclaimConditionSucceeded is set when the reclaim ends: True once the
	// node is Ready in its new cluster, False with why it stopped.
	ReclaimConditionSucceeded = "Succeeded"
)

// Reasons of the conditions of a MachineReclaim.
const (
	ReclaimReasonClusterNotFound = "ClusterNotFound"
	ReclaimReasonMachineNotFound = "MachineNotFound"
	// ReclaimReasonAlreadyInCluster: the machine is in the cluster already.
	ReclaimReasonAlreadyInCluster = "AlreadyInCluster"
	// ReclaimReasonCannotAdd: the TalosMachine that would take the node in
	// is refused (its name is taken, its address is outside the
	// provisioning networks, ...); checked before the reset too.
	ReclaimReasonCannotAdd = "CannotAdd"
	// ReclaimReasonDeleteRefused: deleting the old TalosMachine is refused,
	// for its cluster's etcd quorum; retried, so an admin's override of the
	// check on that machine lets the reclaim go on.
	ReclaimReasonDeleteRefused = "DeleteRefused"
	// ReclaimReasonBadTalosconfig: the talosconfig Secret is missing, of
	// another type, or holds no usable talosconfig.
	ReclaimReasonBadTalosconfig = "BadTalosconfig"
	ReclaimReasonResetting      = "Resetting"
	ReclaimReasonResetFailed    = "ResetFailed"
	// ReclaimReasonJoining: the node is back in maintenance mode and joins
	// through its new TalosMachine.
	ReclaimReasonJoining = "Joining"
	// ReclaimReasonRejected: someone rejected the new TalosMachine.
	ReclaimReasonRejected = "Rejected"
	ReclaimReasonJoined   = "Joined"
	// ReclaimReasonNoSystemUUID: the node has no system UUID to recognise
	// it by after its reset, and no expectedFingerprint is given; nothing is
	// reset.
	ReclaimReasonNoSystemUUID = "NoSystemUUID"
	// ReclaimReasonNotThisMachine: the node answering at the address is not
	// the one reset (another system UUID, or not expectedFingerprint's
	// certificate); nothing is sent to it and it is never approved.
	ReclaimReasonNotThisMachine = "NotThisMachine"
	// ReclaimReasonWaitingForApproval: the new TalosMachine is the node
	// reset, but is not approved on the reclaim's behalf (a control plane):
	// it waits for an admin's approval.
	ReclaimReasonWaitingForApproval = "WaitingForApproval"
)

// The condition the start and reclaim actions set on a TalosOperation or a
// MachineReclaim, and its reason.
const (
	ConditionStarted    = "Started"
	ReasonStartedByUser = "StartedByUser"
)

// The condition a TalosCluster with a backup setting carries, written by
// ichor-controller's backup schedule.
const (
	// ClusterConditionBackupSucceeded says whether the cluster's latest
	// finished TalosBackup succeeded. Not part of Ready.
	ClusterConditionBackupSucceeded = "BackupSucceeded"
)

// Condition types of a TalosBackup.
const (
	// BackupConditionSucceeded says whether the backup's files were all
	// written; False with the reason when it failed.
	BackupConditionSucceeded = "Succeeded"
	// BackupConditionFilesDeleted says, on a deleted backup, whether its
	// files are gone from the target; False with what stops it.
	BackupConditionFilesDeleted = "FilesDeleted"
)

// Reasons of the conditions of a TalosBackup, which the cluster's
// BackupSucceeded condition repeats.
const (
	BackupReasonWritten             = "Written"
	BackupReasonNoBackupSetting     = "NoBackupSetting"
	BackupReasonClusterNotFound     = "ClusterNotFound"
	BackupReasonNotBootstrapped     = "NotBootstrapped"
	BackupReasonSecretsNotReady     = "SecretsNotReady"
	BackupReasonCredentialsNotFound = "CredentialsNotFound"
	BackupReasonTargetUnavailable   = "TargetUnavailable"
	BackupReasonTargetRefused       = "TargetRefused"
	BackupReasonBucketNotFound      = "BucketNotFound"
	BackupReasonSnapshotFailed      = "SnapshotFailed"
	BackupReasonMachineConfigFailed = "MachineConfigFailed"
	BackupReasonInvalidSetting      = "InvalidSetting"
	// BackupReasonAmbientCredentialsRefused: the target names no
	// credentials, and the installation does not let backups reach its
	// bucket with ichor-controller's own cloud identity.
	BackupReasonAmbientCredentialsRefused = "AmbientCredentialsRefused"
	BackupReasonNoBackupYet               = "NoBackupYet"
	BackupReasonDeleting                  = "Deleting"
	BackupReasonDeleteFailed              = "DeleteFailed"
	// BackupReasonAwaitingUpload: an upload backup waits for its snapshot
	// (Succeeded is Unknown).
	BackupReasonAwaitingUpload = "AwaitingUpload"
	// BackupReasonUploading: the snapshot is being received and written.
	BackupReasonUploading = "Uploading"
	// BackupReasonUploaded: the uploaded snapshot is written.
	BackupReasonUploaded = "Uploaded"
	// BackupReasonDigestMismatch: the uploaded bytes do not have the
	// digest spec.upload.digest names; nothing of them was kept.
	BackupReasonDigestMismatch = "DigestMismatch"
	// BackupReasonUploadInterrupted: the upload's stream broke before its
	// end; nothing of it was kept.
	BackupReasonUploadInterrupted = "UploadInterrupted"
)
