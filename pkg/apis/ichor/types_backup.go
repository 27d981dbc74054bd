package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterBackup is a cluster's backup setting: when backups run, where they
// go, who can read them and how long they are kept. Only admins set it (the
// talosclusters/backup subresource): it names Secrets, and what it encrypts
// to decides who can read every secret of the cluster.
type ClusterBackup struct {
	// schedule is when backups run, in cron syntax: five fields (minute,
	// hour, day of month, month, day of week) or a descriptor such as
	// @daily or @every 6h.
	Schedule string
	// timeZone is the IANA time zone the schedule is read in (Europe/Paris);
	// default UTC.
	TimeZone string
	// suspend stops scheduled backups; a TalosBackup created by hand still runs.
	Suspend bool
	// target is where backups are written.
	Target BackupTarget
	// encryption says who can read the backups.
	Encryption BackupEncryption
	// compression applied before encryption; default zstd.
	Compression BackupCompression
	// retention says which backups are kept: those within both limits that
	// are set. Older ones are deleted, from the target and the API, only
	// after a newer backup succeeded.
	Retention BackupRetention
}

// BackupTarget is one object store. Exactly one of s3, gcs, azureBlob and
// volume is set.
type BackupTarget struct {
	// s3 is an Amazon S3 or S3-compatible bucket.
	S3 *S3Target
	// gcs is a Google Cloud Storage bucket.
	GCS *GCSTarget
	// azureBlob is an Azure Blob Storage container.
	AzureBlob *AzureBlobTarget
	// volume is a directory on a volume mounted into ichor-controller
	// (a PersistentVolumeClaim), under its --backup-volume-dir.
	Volume *VolumeTarget
	// prefix starts the key of every object Ichor writes, before
	// "<namespace>/<cluster>/<backup>/".
	Prefix string
}

// S3Target is a bucket of Amazon S3 or of an S3-compatible server.
type S3Target struct {
	// bucket name.
	Bucket string
	// region of the bucket (us-east-1 for most S3-compatible servers).
	Region string
	// endpoint is the https URL of an S3-compatible server; empty for AWS.
	Endpoint string
	// forcePathStyle puts the bucket in the URL's path rather than its host
	// name, as most S3-compatible servers want.
	ForcePathStyle bool
	// credentialsRef names a Secret with the keys accessKeyID and
	// secretAccessKey (and optionally sessionToken). Empty: the
	// controller's own AWS identity (environment, web identity, instance role).
	CredentialsRef *LocalSecretReference
	// caBundle is the PEM certificates that issue endpoint's certificate,
	// when the system's roots do not.
	CABundle string
}

// GCSTarget is a Google Cloud Storage bucket.
type GCSTarget struct {
	// bucket name.
	Bucket string
	// credentialsRef names a Secret whose key credentials.json is a service
	// account key. Empty: the controller's own Google identity (workload identity).
	CredentialsRef *LocalSecretReference
}

// AzureBlobTarget is an Azure Blob Storage container.
type AzureBlobTarget struct {
	// storageAccount is the account's name.
	StorageAccount string
	// container name.
	Container string
	// credentialsRef names a Secret with the key accountKey (a shared key)
	// or sasToken. Empty: the controller's own Azure identity (workload identity).
	CredentialsRef *LocalSecretReference
}

// VolumeTarget is a directory under ichor-controller's --backup-volume-dir.
type VolumeTarget struct {
	// path of the directory, relative to --backup-volume-dir.
	Path string
}

// BackupEncryption says who can read backups. Backups are age-encrypted
// to its recipients; ichor-controller holds no key that decrypts them.
type BackupEncryption struct {
	// recipients are age X25519 public keys (age1…); each one's identity
	// decrypts every backup.
	Recipients []string
}

// BackupCompression is how backup files are compressed before encryption.
type BackupCompression string

const (
	// BackupCompressionZstd compresses with zstd.
	BackupCompressionZstd BackupCompression = "zstd"
	// BackupCompressionNone stores the files as they are (encrypted).
	BackupCompressionNone BackupCompression = "none"
)

// BackupRetention limits the backups kept. At least one limit is set; the
// newest successful backup is always kept.
type BackupRetention struct {
	// count keeps the newest count successful backups.
	Count *int32
	// maxAge keeps the backups completed within this duration (72h) of the
	// newest successful one.
	MaxAge *metav1.Duration
}

// ClusterBackupStatus is what the backup schedule did last.
type ClusterBackupStatus struct {
	// lastScheduleTime is the last time the schedule created a TalosBackup.
	LastScheduleTime *metav1.Time
	// lastSuccessfulBackup is the newest TalosBackup that succeeded.
	LastSuccessfulBackup string
	// lastSuccessfulTime is when it completed.
	LastSuccessfulTime *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosBackup is one backup of a cluster: its etcd snapshot and every
// machine's running config, encrypted to the cluster's backup recipients
// and written to its backup target. The cluster's schedule creates them,
// and an operator may create one to back up now. Deleting one deletes its
// files from the target.
type TalosBackup struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TalosBackupSpec
	Status TalosBackupStatus
}

// TalosBackupSpec says which cluster to back up. It cannot change.
type TalosBackupSpec struct {
	// clusterName is the TalosCluster in this namespace to back up, with
	// its spec.backup settings.
	ClusterName string
	// scheduledAt is the run time of the cluster's schedule this backup
	// stands for; empty for a backup created by hand.
	ScheduledAt *metav1.Time
	// upload makes this backup an etcd snapshot an admin uploads.
	Upload *BackupUpload
}

// BackupUpload describes a snapshot an admin uploads.
type BackupUpload struct {
	// digest is the SHA-256 of the snapshot file, as sha256:<64 hex digits>.
	Digest string
}

// BackupPhase is where a backup is in its life.
type BackupPhase string

const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupSucceeded BackupPhase = "Succeeded"
	BackupFailed    BackupPhase = "Failed"
)

// BackupContent is what a backup file holds.
type BackupContent string

const (
	// BackupContentEtcdSnapshot is an etcd snapshot (etcdctl snapshot save's format).
	BackupContentEtcdSnapshot BackupContent = "EtcdSnapshot"
	// BackupContentMachineConfig is a machine's running config, secrets included.
	BackupContentMachineConfig BackupContent = "MachineConfig"
)

// TalosBackupStatus is what was backed up, where, and how it went.
type TalosBackupStatus struct {
	// phase of the backup.
	Phase BackupPhase
	// startedAt is when the controller began it.
	StartedAt *metav1.MicroTime
	// completedAt is when it succeeded or failed, to the microsecond: the
	// latest finished backup decides the cluster's BackupSucceeded, and
	// backups may end within a second of each other.
	CompletedAt *metav1.MicroTime
	// location is the folder holding the files, as a URL without any
	// credential (s3://bucket/prefix/name/).
	Location string
	// target is the cluster's backup target when the backup ran; the files
	// are deleted from there, whatever the cluster's setting is by then. A
	// failed backup that left no file has none.
	Target *BackupTarget
	// recipients are the age public keys the files are encrypted to.
	Recipients []string
	// compression of the files, before encryption.
	Compression BackupCompression
	// files written, in order.
	Files []BackupFile
	// storedSize is the bytes stored, summed over the files.
	StoredSize int64
	// conditions of the backup: Succeeded, and FilesDeleted while it is deleted.
	Conditions []metav1.Condition
}

// BackupFile is one file of a backup.
type BackupFile struct {
	// name of the object, relative to the backup's location.
	Name string
	// content the file holds.
	Content BackupContent
	// machine whose node the content was read from.
	Machine string
	// storedSize is the bytes stored: compressed and encrypted.
	StoredSize int64
	// contentSize is the bytes of the content itself.
	ContentSize int64
	// digest is the SHA-256 of the content, before compression and
	// encryption, as sha256:<64 hex digits>; a restore checks it.
	Digest string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosBackupList is a list of TalosBackup objects.
type TalosBackupList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TalosBackup
}
