package validation

import (
	"path"
	"regexp"
	"strings"

	"filippo.io/age"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/schedule"
)

// azureStorageAccount is what Azure allows as a storage account name, which
// becomes a host name.
var azureStorageAccount = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

// maxBackupRecipients bounds the age recipients: every file carries a
// stanza per recipient.
const maxBackupRecipients = 20

// validateClusterBackup checks a cluster's backup setting.
func validateClusterBackup(b *ichor.ClusterBackup, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if b.Schedule == "" {
		errs = append(errs, field.Required(fldPath.Child("schedule"), "a cron schedule such as \"0 3 * * *\" or @daily"))
	} else if _, err := schedule.Parse(b.Schedule, ""); err != nil {
		errs = append(errs, field.Invalid(fldPath.Child("schedule"), b.Schedule, err.Error()))
	}
	if _, err := schedule.Location(b.TimeZone); err != nil {
		errs = append(errs, field.Invalid(fldPath.Child("timeZone"), b.TimeZone, err.Error()))
	}
	errs = append(errs, validateBackupTarget(&b.Target, fldPath.Child("target"))...)
	errs = append(errs, validateBackupRecipients(b.Encryption.Recipients, fldPath.Child("encryption", "recipients"))...)
	errs = append(errs, validateEnum(b.Compression, fldPath.Child("compression"), ichor.BackupCompressionZstd, ichor.BackupCompressionNone)...)
	errs = append(errs, validateBackupRetention(&b.Retention, fldPath.Child("retention"))...)
	return errs
}

func validateBackupTarget(t *ichor.BackupTarget, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	if s := t.S3; s != nil {
		set++
		p := fldPath.Child("s3")
		errs = append(errs, validateBucketName(s.Bucket, p.Child("bucket"))...)
		if s.Region == "" {
			errs = append(errs, field.Required(p.Child("region"), "the bucket's region (us-east-1 for most S3-compatible servers)"))
		}
		if s.Endpoint != "" {
			errs = append(errs, validateHTTPSURL(s.Endpoint, p.Child("endpoint"))...)
		}
		if s.CredentialsRef != nil {
			errs = append(errs, validateRequiredName(s.CredentialsRef.Name, p.Child("credentialsRef", "name"))...)
		}
		if s.CABundle != "" {
			errs = append(errs, validateCABundle(s.CABundle, p.Child("caBundle"))...)
		}
	}
	if g := t.GCS; g != nil {
		set++
		p := fldPath.Child("gcs")
		errs = append(errs, validateBucketName(g.Bucket, p.Child("bucket"))...)
		if g.CredentialsRef != nil {
			errs = append(errs, validateRequiredName(g.CredentialsRef.Name, p.Child("credentialsRef", "name"))...)
		}
	}
	if a := t.AzureBlob; a != nil {
		set++
		p := fldPath.Child("azureBlob")
		if !azureStorageAccount.MatchString(a.StorageAccount) {
			errs = append(errs, field.Invalid(p.Child("storageAccount"), a.StorageAccount, "must be 3 to 24 lowercase letters and digits"))
		}
		errs = append(errs, validateBucketName(a.Container, p.Child("container"))...)
		if a.CredentialsRef != nil {
			errs = append(errs, validateRequiredName(a.CredentialsRef.Name, p.Child("credentialsRef", "name"))...)
		}
	}
	if v := t.Volume; v != nil {
		set++
		errs = append(errs, validateRelativePath(v.Path, fldPath.Child("volume", "path"))...)
	}
	switch {
	case set == 0:
		errs = append(errs, field.Required(fldPath, "set one of s3, gcs, azureBlob and volume"))
	case set > 1:
		errs = append(errs, field.Forbidden(fldPath, "set only one of s3, gcs, azureBlob and volume"))
	}
	if t.Prefix != "" {
		errs = append(errs, validateRelativePath(strings.TrimSuffix(t.Prefix, "/"), fldPath.Child("prefix"))...)
	}
	return errs
}

// validateBucketName checks a bucket, container or account name: a
// non-empty name without a path separator or spaces. Each store has its
// own stricter rules; it answers with them.
func validateBucketName(name string, fldPath *field.Path) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(name) > 255:
		return field.ErrorList{field.TooLong(fldPath, "", 255)}
	case strings.ContainsAny(name, "/\\ \t\n?#"):
		return field.ErrorList{field.Invalid(fldPath, name, "must not contain a slash, a space, ? or #")}
	}
	return nil
}

// validateRelativePath checks a slash-separated relative path that stays
// below where it starts.
func validateRelativePath(p string, fldPath *field.Path) field.ErrorList {
	switch {
	case p == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(p) > 512:
		return field.ErrorList{field.TooLong(fldPath, "", 512)}
	case strings.HasPrefix(p, "/"):
		return field.ErrorList{field.Invalid(fldPath, p, "must be relative")}
	case path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == "..":
		return field.ErrorList{field.Invalid(fldPath, p, "must be a clean relative path without . or .. elements")}
	case strings.ContainsAny(p, "\\\x00"):
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain a backslash or NUL")}
	}
	return nil
}

func validateBackupRecipients(recipients []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case len(recipients) == 0:
		return field.ErrorList{field.Required(fldPath, "at least one age X25519 public key (age1…), whose identity can decrypt the backups")}
	case len(recipients) > maxBackupRecipients:
		errs = append(errs, field.TooMany(fldPath, len(recipients), maxBackupRecipients))
	}
	seen := map[string]bool{}
	for i, r := range recipients {
		p := fldPath.Index(i)
		if strings.Contains(strings.ToUpper(r), "AGE-SECRET-KEY-") {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "is an age identity (a secret key), not a recipient: give its public key (age-keygen -y) and keep the identity elsewhere"))
			continue
		}
		if _, err := age.ParseX25519Recipient(r); err != nil {
			// Not echoed: what is not a public key may be a mangled secret one.
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "must be an age X25519 public key (age1…, as age-keygen -y prints it)"))
			continue
		}
		if seen[r] {
			errs = append(errs, field.Duplicate(p, r))
		}
		seen[r] = true
	}
	return errs
}

func validateBackupRetention(r *ichor.BackupRetention, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Count == nil && r.MaxAge == nil {
		return field.ErrorList{field.Required(fldPath, "set count, maxAge or both")}
	}
	if r.Count != nil && *r.Count < 1 {
		errs = append(errs, field.Invalid(fldPath.Child("count"), *r.Count, "must keep at least one backup"))
	}
	if r.MaxAge != nil && r.MaxAge.Duration <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("maxAge"), r.MaxAge.Duration.String(), "must be positive"))
	}
	return errs
}

// ValidateTalosBackup checks a TalosBackup on create.
func ValidateTalosBackup(b *ichor.TalosBackup) field.ErrorList {
	errs := validateNamespacedMeta(&b.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateRequiredName(b.Spec.ClusterName, spec.Child("clusterName"))...)
	if u := b.Spec.Upload; u != nil {
		errs = append(errs, validateDigest(u.Digest, spec.Child("upload", "digest"))...)
		if b.Spec.ScheduledAt != nil {
			errs = append(errs, field.Forbidden(spec.Child("scheduledAt"), "an uploaded snapshot is not a run of the schedule"))
		}
	}
	return errs
}

// validateDigest checks a SHA-256 digest written as sha256:<64 hex digits>.
func validateDigest(d string, fldPath *field.Path) field.ErrorList {
	if d == "" {
		return field.ErrorList{field.Required(fldPath, "the file's SHA-256, as sha256:<64 hex digits> (sha256sum prints the digits)")}
	}
	if hex, ok := strings.CutPrefix(d, "sha256:"); !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return field.ErrorList{field.Invalid(fldPath, d, "must be sha256: and 64 lowercase hex digits")}
	}
	return nil
}

// ValidateTalosBackupUpdate checks an update: what was asked does not change.
func ValidateTalosBackupUpdate(b, old *ichor.TalosBackup) field.ErrorList {
	errs := validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateImmutableSpec(b.Spec, old.Spec, field.NewPath("spec"), "create a new TalosBackup instead")...)
}

// ValidateTalosBackupStatusUpdate checks a status written through /status.
func ValidateTalosBackupStatusUpdate(b, old *ichor.TalosBackup) field.ErrorList {
	errs := validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	s := &b.Status
	errs = append(errs, validateOptionalEnum(s.Phase, status.Child("phase"),
		ichor.BackupPending, ichor.BackupRunning, ichor.BackupSucceeded, ichor.BackupFailed)...)
	errs = append(errs, validateOptionalEnum(s.Compression, status.Child("compression"), ichor.BackupCompressionZstd, ichor.BackupCompressionNone)...)
	if s.Target != nil {
		errs = append(errs, validateBackupTarget(s.Target, status.Child("target"))...)
	}
	for i, f := range s.Files {
		p := status.Child("files").Index(i)
		errs = append(errs, validateRelativePath(f.Name, p.Child("name"))...)
		errs = append(errs, validateEnum(f.Content, p.Child("content"), ichor.BackupContentEtcdSnapshot, ichor.BackupContentMachineConfig)...)
		if f.Machine != "" || b.Spec.Upload == nil {
			errs = append(errs, validateRequiredName(f.Machine, p.Child("machine"))...)
		}
		if f.StoredSize < 0 || f.ContentSize < 0 {
			errs = append(errs, field.Invalid(p.Child("storedSize"), f.StoredSize, "sizes must not be negative"))
		}
		errs = append(errs, validateDigest(f.Digest, p.Child("digest"))...)
	}
	if s.StoredSize < 0 {
		errs = append(errs, field.Invalid(status.Child("storedSize"), s.StoredSize, "must not be negative"))
	}
	return append(errs, validateConditions(s.Conditions, status.Child("conditions"))...)
}
