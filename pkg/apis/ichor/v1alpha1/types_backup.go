package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterBackup is a cluster's backup setting: when backups run, where they
// go, who can read them and how long they are kept. Only admins set it (the
// talosclusters/backup subresource): it names Secrets, and what it encrypts
// to decides who can read every secret of the cluster.
type ClusterBackup struct {
	// schedule is when backups run, in cron syntax: five fields (minute,
	// hour, day of month, month, day of week) or a descriptor such as
	// @daily or @every 6h.
	Schedule string `json:"schedule" protobuf:"bytes,1,opt,name=schedule"`
	// timeZone is the IANA time zone the schedule is read in (Europe/Paris);
	// default UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty" protobuf:"bytes,2,opt,name=timeZone"`
	// suspend stops scheduled backups; a TalosBackup created by hand still runs.
	// +optional
	Suspend bool `json:"suspend,omitempty" protobuf:"varint,3,opt,name=suspend"`
	// target is where backups are written.
	Target BackupTarget `json:"target" protobuf:"bytes,4,opt,name=target"`
	// encryption says who can read the backups.
	Encryption BackupEncryption `json:"encryption" protobuf:"bytes,5,opt,name=encryption"`
	// compression applied before encryption; default zstd.
	// +optional
	Compression BackupCompression `json:"compression,omitempty" protobuf:"bytes,6,opt,name=compression,casttype=BackupCompression"`
	// retention says which backups are kept: those within both limits that
	// are set. Older ones are deleted, from the target and the API, only
	// after a newer backup succeeded.
	Retention BackupRetention `json:"retention" protobuf:"bytes,7,opt,name=retention"`
}

// BackupTarget is one object store. Exactly one of s3, gcs, azureBlob and
// volume is set.
type BackupTarget struct {
	// s3 is an Amazon S3 or S3-compatible bucket.
	// +optional
	S3 *S3Target `json:"s3,omitempty" protobuf:"bytes,1,opt,name=s3"`
	// gcs is a Google Cloud Storage bucket.
	// +optional
	GCS *GCSTarget `json:"gcs,omitempty" protobuf:"bytes,2,opt,name=gcs"`
	// azureBlob is an Azure Blob Storage container.
	// +optional
	AzureBlob *AzureBlobTarget `json:"azureBlob,omitempty" protobuf:"bytes,3,opt,name=azureBlob"`
	// volume is a directory on a volume mounted into ichor-controller
	// (a PersistentVolumeClaim), under its --backup-volume-dir.
	// +optional
	Volume *VolumeTarget `json:"volume,omitempty" protobuf:"bytes,4,opt,name=volume"`
	// prefix starts the key of every object Ichor writes, before
	// "<namespace>/<cluster>/<backup>/".
	// +optional
	Prefix string `json:"prefix,omitempty" protobuf:"bytes,5,opt,name=prefix"`
}

// S3Target is a bucket of Amazon S3 or of an S3-compatible server.
type S3Target struct {
	// bucket name.
	Bucket string `json:"bucket" protobuf:"bytes,1,opt,name=bucket"`
	// region of the bucket (us-east-1 for most S3-compatible servers).
	Region string `json:"region" protobuf:"bytes,2,opt,name=region"`
	// endpoint is the https URL of an S3-compatible server; empty for AWS.
	// +optional
	Endpoint string `json:"endpoint,omitempty" protobuf:"bytes,3,opt,name=endpoint"`
	// forcePathStyle puts the bucket in the URL's path rather than its host
	// name, as most S3-compatible servers want.
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty" protobuf:"varint,4,opt,name=forcePathStyle"`
	// credentialsRef names a Secret with the keys accessKeyID and
	// secretAccessKey (and optionally sessionToken). Empty: the
	// controller's own AWS identity (environment, web identity, instance role).
	// +optional
	CredentialsRef *LocalSecretReference `json:"credentialsRef,omitempty" protobuf:"bytes,5,opt,name=credentialsRef"`
	// caBundle is the PEM certificates that issue endpoint's certificate,
	// when the system's roots do not.
	// +optional
	CABundle string `json:"caBundle,omitempty" protobuf:"bytes,6,opt,name=caBundle"`
}

// GCSTarget is a Google Cloud Storage bucket.
type GCSTarget struct {
	// bucket name.
	Bucket string `json:"bucket" protobuf:"bytes,1,opt,name=bucket"`
	// credentialsRef names a Secret whose key credentials.json is a service
	// account key. Empty: the controller's own Google identity (workload identity).
	// +optional
	CredentialsRef *LocalSecretReference `json:"credentialsRef,omitempty" protobuf:"bytes,2,opt,name=credentialsRef"`
}

// AzureBlobTarget is an Azure Blob Storage container.
type AzureBlobTarget struct {
	// storageAccount is the account's name.
	StorageAccount string `json:"storageAccount" protobuf:"bytes,1,opt,name=storageAccount"`
	// container name.
	Container string `json:"container" protobuf:"bytes,2,opt,name=container"`
	// credentialsRef names a Secret with the key accountKey (a shared key)
	// or sasToken. Empty: the controller's own Azure identity (workload identity).
	// +optional
	CredentialsRef *LocalSecretReference `json:"credentialsRef,omitempty" protobuf:"bytes,3,opt,name=credentialsRef"`
}

// VolumeTarget is a directory under ichor-controller's --backup-volume-dir.
type VolumeTarget struct {
	// path of the directory, relative to --backup-volume-dir.
	Path string `json:"path" protobuf:"bytes,1,opt,name=path"`
}

// BackupEncryption says who can read backups. Backups are age-encrypted
// to its recipients; ichor-controller holds no key that decrypts them.
type BackupEncryption struct {
	// recipients are age X25519 public keys (age1…); each one's identity
	// decrypts every backup.
	// +listType=set
	Recipients []string `json:"recipients" protobuf:"bytes,1,rep,name=recipients"`
}

// BackupCompression is how backup files are compressed before encryption.
// +enum
type BackupCompression string

const (
	// BackupCompressionZstd compresses with zstd.
	BackupCompressionZstd BackupCompression = "zstd"
	// BackupCompressionNone stores the files as they are (encrypted).
	BackupCompressionNone BackupCompression = "none"
)

// BackupRetention limits the scheduled backups kept (a backup created by
// hand stays until it is deleted). At least one limit is set; the newest
// successful backup is always kept.
type BackupRetention struct {
	// count keeps the newest count successful backups.
	// +optional
	Count *int32 `json:"count,omitempty" protobuf:"varint,1,opt,name=count"`
	// maxAge keeps the backups completed within this duration (72h) of the
	// newest successful one.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty" protobuf:"bytes,2,opt,name=maxAge"`
}

// ClusterBackupStatus is what the backup schedule did last.
type ClusterBackupStatus struct {
	// lastScheduleTime is the last time the schedule created a TalosBackup.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty" protobuf:"bytes,1,opt,name=lastScheduleTime"`
	// lastSuccessfulBackup is the newest TalosBackup that succeeded.
	// +optional
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty" protobuf:"bytes,2,opt,name=lastSuccessfulBackup"`
	// lastSuccessfulTime is when it completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty" protobuf:"bytes,3,opt,name=lastSuccessfulTime"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosBackup is one backup of a cluster: its etcd snapshot and every
// machine's running config, encrypted to the cluster's backup recipients
// and written to its backup target. The cluster's schedule creates them,
// and an operator may create one to back up now. Deleting one deletes its
// files from the target, unless an admin annotated it
// ichor.dev/keep-files: "true" (a target that is gone for good).
type TalosBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   TalosBackupSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status TalosBackupStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// TalosBackupSpec says which cluster to back up. It cannot change.
type TalosBackupSpec struct {
	// clusterName is the TalosCluster in this namespace to back up, with
	// its spec.backup settings.
	ClusterName string `json:"clusterName" protobuf:"bytes,1,opt,name=clusterName"`
	// scheduledAt is the run time of the cluster's schedule this backup
	// stands for; empty for a backup created by hand. Only the schedule
	// sets it (it needs the update verb on talosbackups/schedule, which
	// ichor-controller alone holds), and only scheduled backups are pruned
	// by the cluster's retention.
	// +optional
	ScheduledAt *metav1.Time `json:"scheduledAt,omitempty" protobuf:"bytes,2,opt,name=scheduledAt"`
	// upload makes this backup an etcd snapshot taken elsewhere (by
	// talosctl etcd snapshot, or kept from another cluster's backup) that
	// an admin streams in through talosbackups/NAME/upload, rather than
	// one the controller takes. The controller writes it to the cluster's
	// backup target like any backup, encrypted to its recipients, and an
	// etcd-restore takes it like any backup. It cannot be scheduled.
	// +optional
	Upload *BackupUpload `json:"upload,omitempty" protobuf:"bytes,3,opt,name=upload"`
}

// BackupUpload describes a snapshot an admin uploads.
type BackupUpload struct {
	// digest is the SHA-256 of the snapshot file, as sha256:<64 hex
	// digits> (sha256sum prints the hex digits). An upload whose bytes
	// have another digest is refused and nothing of it is kept.
	Digest string `json:"digest" protobuf:"bytes,1,opt,name=digest"`
}

// UploadSubresource is the subresource a snapshot is uploaded through:
// POST talosbackups/NAME/upload with the file as the request's body
// (application/octet-stream). RBAC's create verb on it is an admin's:
// what is uploaded is what a restore writes into a cluster's etcd.
const UploadSubresource = "upload"

// AnnotationKeepFiles, set to "true" on a TalosBackup by an admin, lets a
// deleted backup go without deleting its files: for a target that is gone
// for good, or files an admin keeps elsewhere. The controller records an
// Event naming the files it left.
const AnnotationKeepFiles = "ichor.dev/keep-files"

// AnnotationOperation marks a TalosBackup an operation created (a
// shutdown's backup before its first node goes down); its value is the
// operation's UID.
const AnnotationOperation = "ichor.dev/operation"

// BackupPhase is where a backup is in its life.
// +enum
type BackupPhase string

const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupSucceeded BackupPhase = "Succeeded"
	BackupFailed    BackupPhase = "Failed"
)

// BackupContent is what a backup file holds.
// +enum
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
	// +optional
	Phase BackupPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=BackupPhase"`
	// startedAt is when the controller began it.
	// +optional
	StartedAt *metav1.MicroTime `json:"startedAt,omitempty" protobuf:"bytes,2,opt,name=startedAt"`
	// completedAt is when it succeeded or failed, to the microsecond: the
	// latest finished backup decides the cluster's BackupSucceeded, and
	// backups may end within a second of each other.
	// +optional
	CompletedAt *metav1.MicroTime `json:"completedAt,omitempty" protobuf:"bytes,3,opt,name=completedAt"`
	// location is the folder holding the files, as a URL without any
	// credential (s3://bucket/prefix/name/).
	// +optional
	Location string `json:"location,omitempty" protobuf:"bytes,4,opt,name=location"`
	// target is the cluster's backup target when the backup ran; the files
	// are deleted from there, whatever the cluster's setting is by then. A
	// failed backup that left no file has none.
	// +optional
	Target *BackupTarget `json:"target,omitempty" protobuf:"bytes,5,opt,name=target"`
	// recipients are the age public keys the files are encrypted to.
	// +optional
	// +listType=atomic
	Recipients []string `json:"recipients,omitempty" protobuf:"bytes,6,rep,name=recipients"`
	// compression of the files, before encryption.
	// +optional
	Compression BackupCompression `json:"compression,omitempty" protobuf:"bytes,7,opt,name=compression,casttype=BackupCompression"`
	// files written, in order.
	// +optional
	// +listType=atomic
	Files []BackupFile `json:"files,omitempty" protobuf:"bytes,8,rep,name=files"`
	// storedSize is the bytes stored, summed over the files.
	// +optional
	StoredSize int64 `json:"storedSize,omitempty" protobuf:"varint,9,opt,name=storedSize"`
	// conditions of the backup: Succeeded, and FilesDeleted while it is deleted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,10,rep,name=conditions"`
}

// BackupFile is one file of a backup.
type BackupFile struct {
	// name of the object, relative to the backup's location.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// content the file holds.
	Content BackupContent `json:"content" protobuf:"bytes,2,opt,name=content,casttype=BackupContent"`
	// machine whose node the content was read from; empty for an
	// uploaded snapshot.
	// +optional
	Machine string `json:"machine,omitempty" protobuf:"bytes,3,opt,name=machine"`
	// storedSize is the bytes stored: compressed and encrypted.
	StoredSize int64 `json:"storedSize" protobuf:"varint,4,opt,name=storedSize"`
	// contentSize is the bytes of the content itself.
	ContentSize int64 `json:"contentSize" protobuf:"varint,5,opt,name=contentSize"`
	// digest is the SHA-256 of the content, before compression and
	// encryption, as sha256:<64 hex digits>; a restore checks it.
	Digest string `json:"digest" protobuf:"bytes,6,opt,name=digest"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosBackupList is a list of TalosBackup objects.
type TalosBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []TalosBackup `json:"items" protobuf:"bytes,2,rep,name=items"`
}
