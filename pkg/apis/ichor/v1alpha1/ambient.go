package v1alpha1

import (
	"errors"
	"net/url"
	"strings"
)

// AmbientBucket names the bucket a backup target reaches with
// ichor-controller's own cloud identity, as the IchorInstallation's
// spec.settings.ambientCredentialBuckets lists it: s3:<bucket> on AWS,
// s3:<endpoint host>/<bucket> on an S3-compatible server (the controller's
// AWS credentials sign what it sends there), gcs:<bucket>,
// azure:<storageAccount>/<container>. false: the target brings its own
// credentials, or is a volume.
func AmbientBucket(t *BackupTarget) (string, bool) {
	switch {
	case t.S3 != nil && t.S3.CredentialsRef == nil:
		if t.S3.Endpoint == "" {
			return "s3:" + t.S3.Bucket, true
		}
		host := t.S3.Endpoint
		if u, err := url.Parse(t.S3.Endpoint); err == nil && u.Host != "" {
			host = u.Host
		}
		return "s3:" + host + "/" + t.S3.Bucket, true
	case t.GCS != nil && t.GCS.CredentialsRef == nil:
		return "gcs:" + t.GCS.Bucket, true
	case t.AzureBlob != nil && t.AzureBlob.CredentialsRef == nil:
		return "azure:" + t.AzureBlob.StorageAccount + "/" + t.AzureBlob.Container, true
	}
	return "", false
}

// ValidAmbientBucket checks a name of ambientCredentialBuckets.
func ValidAmbientBucket(name string) error {
	kind, rest, ok := strings.Cut(name, ":")
	switch {
	case !ok || rest == "" || strings.ContainsAny(rest, " \t\n"):
		return errors.New("s3:<bucket>, s3:<endpoint host>/<bucket>, gcs:<bucket> or azure:<storageAccount>/<container>")
	case kind == "s3" && strings.Count(rest, "/") <= 1 && !strings.HasPrefix(rest, "/") && !strings.HasSuffix(rest, "/"):
	case kind == "gcs" && !strings.Contains(rest, "/"):
	case kind == "azure" && strings.Count(rest, "/") == 1 && !strings.HasPrefix(rest, "/") && !strings.HasSuffix(rest, "/"):
	default:
		return errors.New("s3:<bucket>, s3:<endpoint host>/<bucket>, gcs:<bucket> or azure:<storageAccount>/<container>")
	}
	return nil
}
