package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// A fixed age X25519 key pair: the recipient and, pasted by mistake, its identity.
const (
	testRecipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
	testIdentity  = "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX"
)

func validBackup() *ichor.ClusterBackup {
	return &ichor.ClusterBackup{
		Schedule: "0 3 * * *",
		TimeZone: "Europe/Paris",
		Target: ichor.BackupTarget{S3: &ichor.S3Target{
			Bucket: "backups", Region: "eu-west-3", CredentialsRef: &ichor.LocalSecretReference{Name: "s3"},
		}},
		Encryption:  ichor.BackupEncryption{Recipients: []string{testRecipient}},
		Compression: ichor.BackupCompressionZstd,
		Retention:   ichor.BackupRetention{Count: ptr(int32(7)), MaxAge: &metav1.Duration{Duration: 30 * 24 * time.Hour}},
	}
}

func TestValidateClusterBackup(t *testing.T) {
	const p = "spec.backup."
	for _, c := range []struct {
		name   string
		mutate func(b *ichor.ClusterBackup)
		want   []fe
	}{
		{name: "valid", mutate: func(*ichor.ClusterBackup) {}},
		{name: "valid volume, count only", mutate: func(b *ichor.ClusterBackup) {
			b.Target = ichor.BackupTarget{Volume: &ichor.VolumeTarget{Path: "clusters/prod"}, Prefix: "nightly/"}
			b.Retention.MaxAge = nil
		}},
		{name: "valid GCS", mutate: func(b *ichor.ClusterBackup) {
			b.Target = ichor.BackupTarget{GCS: &ichor.GCSTarget{Bucket: "b"}}
		}},
		{name: "valid Azure", mutate: func(b *ichor.ClusterBackup) {
			b.Target = ichor.BackupTarget{AzureBlob: &ichor.AzureBlobTarget{StorageAccount: "acct01", Container: "backups"}}
		}},
		{name: "an Azure account that is no host name", mutate: func(b *ichor.ClusterBackup) {
			b.Target = ichor.BackupTarget{AzureBlob: &ichor.AzureBlobTarget{StorageAccount: "evil.example.com#", Container: "c"}}
		}, want: []fe{invalid(p + "target.azureBlob.storageAccount")}},
		{name: "runs under a minute apart", mutate: func(b *ichor.ClusterBackup) { b.Schedule = "@every 10s" }, want: []fe{invalid(p + "schedule")}},
		{name: "bad schedule and time zone", mutate: func(b *ichor.ClusterBackup) { b.Schedule = "every night"; b.TimeZone = "Mars/Olympus" },
			want: []fe{invalid(p + "schedule"), invalid(p + "timeZone")}},
		{name: "no schedule", mutate: func(b *ichor.ClusterBackup) { b.Schedule = "" }, want: []fe{required(p + "schedule")}},
		{name: "no target", mutate: func(b *ichor.ClusterBackup) { b.Target = ichor.BackupTarget{} }, want: []fe{required(p + "target")}},
		{name: "two targets", mutate: func(b *ichor.ClusterBackup) {
			b.Target.AzureBlob = &ichor.AzureBlobTarget{StorageAccount: "acct", Container: "c"}
		}, want: []fe{forbidden(p + "target")}},
		{name: "bad S3", mutate: func(b *ichor.ClusterBackup) {
			b.Target.S3 = &ichor.S3Target{Bucket: "a/b", Endpoint: "http://minio:9000", CABundle: "not pem", CredentialsRef: &ichor.LocalSecretReference{}}
		}, want: []fe{invalid(p + "target.s3.bucket"), required(p + "target.s3.region"), invalid(p + "target.s3.endpoint"),
			invalid(p + "target.s3.caBundle"), required(p + "target.s3.credentialsRef.name")}},
		{name: "a volume path that leaves its directory", mutate: func(b *ichor.ClusterBackup) {
			b.Target = ichor.BackupTarget{Volume: &ichor.VolumeTarget{Path: "../etc"}, Prefix: "/abs"}
		}, want: []fe{invalid(p + "target.volume.path"), invalid(p + "target.prefix")}},
		{name: "no recipient", mutate: func(b *ichor.ClusterBackup) { b.Encryption.Recipients = nil }, want: []fe{required(p + "encryption.recipients")}},
		{name: "bad and duplicate recipients", mutate: func(b *ichor.ClusterBackup) {
			b.Encryption.Recipients = []string{"age1nope", testRecipient, testRecipient, "ssh-ed25519 AAAA"}
		}, want: []fe{invalid(p + "encryption.recipients[0]"), duplicate(p + "encryption.recipients[2]"), invalid(p + "encryption.recipients[3]")}},
		{name: "bad compression", mutate: func(b *ichor.ClusterBackup) { b.Compression = "gzip" }, want: []fe{notSupported(p + "compression")}},
		{name: "no retention", mutate: func(b *ichor.ClusterBackup) { b.Retention = ichor.BackupRetention{} }, want: []fe{required(p + "retention")}},
		{name: "a retention of zero", mutate: func(b *ichor.ClusterBackup) {
			b.Retention = ichor.BackupRetention{Count: ptr(int32(0)), MaxAge: &metav1.Duration{}}
		}, want: []fe{invalid(p + "retention.count"), invalid(p + "retention.maxAge")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := validCluster()
			cl.Spec.Backup = validBackup()
			c.mutate(cl.Spec.Backup)
			expectErrors(t, ValidateTalosCluster(cl), c.want...)
		})
	}
}

func TestAnIdentityPastedAsRecipientIsNeverEchoed(t *testing.T) {
	for _, pasted := range []string{testIdentity, strings.ToLower(testIdentity), " " + testIdentity[:40]} {
		cl := validCluster()
		cl.Spec.Backup = validBackup()
		cl.Spec.Backup.Encryption.Recipients = []string{pasted}
		errs := ValidateTalosCluster(cl)
		expectErrors(t, errs, invalid("spec.backup.encryption.recipients[0]"))
		if msg := errs.ToAggregate().Error(); strings.Contains(strings.ToUpper(msg), "AGE-SECRET-KEY") || !strings.Contains(msg, "age-keygen -y") {
			t.Fatalf("error: %s", msg)
		}
	}
}

func TestValidateTalosBackup(t *testing.T) {
	b := &ichor.TalosBackup{ObjectMeta: metav1.ObjectMeta{Name: "prod-now", Namespace: "team-a"}, Spec: ichor.TalosBackupSpec{ClusterName: "prod"}}
	expectErrors(t, ValidateTalosBackup(b))
	changed := b.DeepCopy()
	changed.Spec.ClusterName = "other"
	changed.ResourceVersion = "1"
	b.ResourceVersion = "1"
	expectErrors(t, ValidateTalosBackupUpdate(changed, b), invalid("spec"))

	st := b.DeepCopy()
	st.Status = ichor.TalosBackupStatus{Phase: ichor.BackupSucceeded, Files: []ichor.BackupFile{
		{Name: "etcd.snapshot.zst.age", Content: ichor.BackupContentEtcdSnapshot, Machine: "cp-1", StoredSize: 10, ContentSize: 20,
			Digest: "sha256:" + strings.Repeat("ab", 32)},
		{Name: "../x", Content: "Kubeconfig", Machine: "", StoredSize: -1, Digest: "md5:00"},
	}}
	expectErrors(t, ValidateTalosBackupStatusUpdate(st, b),
		invalid("status.files[1].name"), notSupported("status.files[1].content"), required("status.files[1].machine"),
		invalid("status.files[1].storedSize"), invalid("status.files[1].digest"))
}

func TestValidateTalosBackupUpload(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0f", 32)
	b := &ichor.TalosBackup{ObjectMeta: metav1.ObjectMeta{Name: "from-laptop", Namespace: "team-a"},
		Spec: ichor.TalosBackupSpec{ClusterName: "prod", Upload: &ichor.BackupUpload{Digest: digest}}}
	expectErrors(t, ValidateTalosBackup(b))

	for _, bad := range []string{"", strings.Repeat("0f", 32), "sha256:" + strings.Repeat("0F", 32), "sha512:" + strings.Repeat("0f", 32), digest + "00"} {
		u := b.DeepCopy()
		u.Spec.Upload.Digest = bad
		want := invalid("spec.upload.digest")
		if bad == "" {
			want = required("spec.upload.digest")
		}
		expectErrors(t, ValidateTalosBackup(u), want)
	}
	scheduled := b.DeepCopy()
	scheduled.Spec.ScheduledAt = &metav1.Time{}
	expectErrors(t, ValidateTalosBackup(scheduled), forbidden("spec.scheduledAt"))

	// An uploaded snapshot was read from no machine of the cluster.
	b.ResourceVersion = "1"
	st := b.DeepCopy()
	st.Status = ichor.TalosBackupStatus{Phase: ichor.BackupSucceeded, Files: []ichor.BackupFile{
		{Name: "etcd.snapshot.zst.age", Content: ichor.BackupContentEtcdSnapshot, StoredSize: 10, ContentSize: 20, Digest: digest}}}
	expectErrors(t, ValidateTalosBackupStatusUpdate(st, b))
}
