// Package store opens a backup target (TalosCluster spec.backup.target) as
// a gocloud.dev blob bucket: one library for Amazon S3 and S3-compatible
// servers, Google Cloud Storage, Azure Blob Storage and a mounted volume.
// Credentials come from the Secret the admin names, or, when none is named,
// from the controller's own cloud identity.
package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/googleapi"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// The keys of a target's credentials Secret.
const (
	KeyS3AccessKeyID     = "accessKeyID"
	KeyS3SecretAccessKey = "secretAccessKey"
	KeyS3SessionToken    = "sessionToken"
	KeyGCSCredentials    = "credentials.json"
	KeyAzureAccountKey   = "accountKey"
	KeyAzureSASToken     = "sasToken"
)

// Target is an opened backup target.
type Target struct {
	// Bucket is where the files go; its keys start at the target's prefix.
	*blob.Bucket
	// Location is the target's URL, without credentials, ending in /.
	Location string

	secrets []string // the credential values, which no message may carry
	// dir is a volume target's directory, prefix included; "" for a store.
	dir string
}

// RemoveEmptyFolder removes the directories of folder (a key prefix ending
// in /) that deleting its objects left empty on a volume target, deepest
// first; a directory that still holds anything stays. Object stores have
// no directories: for them it does nothing.
func (t *Target) RemoveEmptyFolder(folder string) error {
	if t.dir == "" {
		return nil
	}
	root := filepath.Join(t.dir, filepath.FromSlash(strings.TrimSuffix(folder, "/")))
	var dirs []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !isNotEmpty(err) {
			return err
		}
	}
	return nil
}

// isNotEmpty reports whether err is rmdir's refusal of a directory that
// still has entries.
func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}

// urlQuery matches the query of a URL in a message: SAS tokens and
// presigned URLs carry credentials there.
var urlQuery = regexp.MustCompile(`(https?://[^\s?"'<>]*)\?[^\s"'<>]*`)

// Redact returns err's message as an error with every credential value of
// the target, and every URL query, replaced: a store's SDK may quote a
// request's URL in its errors, and messages go to status and Events.
func (t *Target) Redact(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(RedactMessage(err.Error(), t.secrets...))
}

// RedactMessage replaces each secret, and every URL query, in msg.
func RedactMessage(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
		}
	}
	return urlQuery.ReplaceAllString(msg, "$1?<redacted>")
}

// Options are what opening a target needs beyond its spec.
type Options struct {
	// Credentials is the data of the Secret the target's credentialsRef
	// names; nil when it names none.
	Credentials map[string][]byte
	// VolumeDir is the directory volume targets are paths under
	// (ichor-controller's --backup-volume-dir); empty refuses them.
	VolumeDir string
	// Folder is where below the target's prefix this cluster's backups go:
	// "<namespace>/<cluster>/", so that clusters of the same name in two
	// namespaces never share a folder, whatever prefix an admin chose.
	Folder string
}

// CredentialsRef is the Secret t's credentials come from, or nil for the
// controller's own cloud identity (and for a volume, which needs none).
func CredentialsRef(t *v1alpha1.BackupTarget) *v1alpha1.LocalSecretReference {
	switch {
	case t.S3 != nil:
		return t.S3.CredentialsRef
	case t.GCS != nil:
		return t.GCS.CredentialsRef
	case t.AzureBlob != nil:
		return t.AzureBlob.CredentialsRef
	}
	return nil
}

// Open opens t. The caller closes the Target.
func Open(ctx context.Context, t *v1alpha1.BackupTarget, opts Options) (*Target, error) {
	prefix := t.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	prefix += opts.Folder
	var (
		b         *blob.Bucket
		location  string
		volumeDir string
		err       error
	)
	switch {
	case t.S3 != nil:
		b, err = openS3(ctx, t.S3, opts.Credentials)
		location = "s3://" + t.S3.Bucket + "/"
	case t.GCS != nil:
		b, err = openGCS(ctx, t.GCS, opts.Credentials)
		location = "gs://" + t.GCS.Bucket + "/"
	case t.AzureBlob != nil:
		b, err = openAzure(ctx, t.AzureBlob, opts.Credentials)
		location = "azblob://" + t.AzureBlob.StorageAccount + "/" + t.AzureBlob.Container + "/"
	case t.Volume != nil:
		var dir string
		dir, err = volumePath(opts.VolumeDir, t.Volume.Path)
		volumeDir = dir
		if err == nil {
			b, err = fileblob.OpenBucket(dir, &fileblob.Options{CreateDir: true, DirFileMode: 0o700, NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
		}
		location = "file://" + filepath.ToSlash(dir) + "/"
	default:
		return nil, errors.New("the backup target names no store: set one of s3, gcs, azureBlob and volume")
	}
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix)
	}
	var secrets []string
	for _, v := range opts.Credentials {
		secrets = append(secrets, string(v))
	}
	target := &Target{Bucket: b, Location: location + prefix, secrets: secrets}
	if t.Volume != nil {
		target.dir = filepath.Join(volumeDir, filepath.FromSlash(prefix))
	}
	return target, nil
}

// volumePath resolves a volume target's path under dir, refusing any that
// would leave it.
func volumePath(dir, p string) (string, error) {
	if dir == "" {
		return "", errors.New("volume targets are off: start ichor-controller with --backup-volume-dir where a volume is mounted")
	}
	clean := path.Clean("/" + p)
	if clean == "/" || clean != "/"+p {
		return "", fmt.Errorf("volume path %q must be a clean relative path", p)
	}
	return filepath.Join(dir, filepath.FromSlash(clean)), nil
}

func openS3(ctx context.Context, t *v1alpha1.S3Target, creds map[string][]byte) (*blob.Bucket, error) {
	var cfg aws.Config
	if creds != nil {
		// Only what the target says: no setting of the controller's
		// environment (AWS_* variables, shared files) applies to it.
		id, secret := string(creds[KeyS3AccessKeyID]), string(creds[KeyS3SecretAccessKey])
		if id == "" || secret == "" {
			return nil, fmt.Errorf("the credentials Secret needs the keys %s and %s", KeyS3AccessKeyID, KeyS3SecretAccessKey)
		}
		cfg = aws.Config{Region: t.Region, Credentials: aws.NewCredentialsCache(
			credentials.NewStaticCredentialsProvider(id, secret, string(creds[KeyS3SessionToken])))}
	} else {
		var err error
		if cfg, err = awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(t.Region)); err != nil {
			return nil, fmt.Errorf("the controller's AWS identity: %w", err)
		}
	}
	var httpClient *http.Client
	if t.CABundle != "" {
		// The bundle is all the endpoint is trusted by.
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(t.CABundle)) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		httpClient = &http.Client{Transport: transport}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if t.Endpoint != "" {
			o.BaseEndpoint = aws.String(t.Endpoint)
			// S3-compatible servers differ in the integrity checksums
			// they accept: send them only where S3 requires them.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
		if httpClient != nil {
			o.HTTPClient = httpClient
		}
		o.UsePathStyle = t.ForcePathStyle
	})
	return s3blob.OpenBucket(ctx, client, t.Bucket, nil)
}

func openGCS(ctx context.Context, t *v1alpha1.GCSTarget, creds map[string][]byte) (*blob.Bucket, error) {
	var (
		c   *google.Credentials
		err error
	)
	if creds != nil {
		key := creds[KeyGCSCredentials]
		if len(key) == 0 {
			return nil, fmt.Errorf("the credentials Secret needs the key %s (a service account key)", KeyGCSCredentials)
		}
		// Only service account keys: other credential types name files
		// and URLs the controller would read.
		c, err = google.CredentialsFromJSONWithType(ctx, key, google.ServiceAccount, "https://www.googleapis.com/auth/devstorage.read_write")
	} else {
		c, err = gcp.DefaultCredentials(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("Google credentials: %w", err)
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), gcp.CredentialsTokenSource(c))
	if err != nil {
		return nil, err
	}
	return gcsblob.OpenBucket(ctx, client, t.Bucket, nil)
}

// storageAccount is what Azure allows as an account name, which becomes a host name.
var storageAccount = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

func openAzure(ctx context.Context, t *v1alpha1.AzureBlobTarget, creds map[string][]byte) (*blob.Bucket, error) {
	if !storageAccount.MatchString(t.StorageAccount) {
		return nil, fmt.Errorf("storage account %q must be 3 to 24 lowercase letters and digits", t.StorageAccount)
	}
	url := fmt.Sprintf("https://%s.blob.core.windows.net/%s", t.StorageAccount, t.Container)
	var (
		client *container.Client
		err    error
	)
	switch {
	case creds == nil:
		var cred *azidentity.DefaultAzureCredential
		if cred, err = azidentity.NewDefaultAzureCredential(nil); err == nil {
			client, err = container.NewClient(url, cred, nil)
		}
	case len(creds[KeyAzureAccountKey]) > 0:
		var cred *azblob.SharedKeyCredential
		if cred, err = azblob.NewSharedKeyCredential(t.StorageAccount, string(creds[KeyAzureAccountKey])); err == nil {
			client, err = container.NewClientWithSharedKeyCredential(url, cred, nil)
		}
	case len(creds[KeyAzureSASToken]) > 0:
		client, err = container.NewClientWithNoCredential(url+"?"+strings.TrimPrefix(string(creds[KeyAzureSASToken]), "?"), nil)
	default:
		return nil, fmt.Errorf("the credentials Secret needs the key %s or %s", KeyAzureAccountKey, KeyAzureSASToken)
	}
	if err != nil {
		// The SDK's errors may quote the key: say only which step failed.
		return nil, errors.New("Azure credentials: the Secret's key does not form a valid credential")
	}
	return azureblob.OpenBucket(ctx, client, nil)
}

// WriterOptions bound what a write holds in memory: parts of this size,
// this many in flight.
var WriterOptions = &blob.WriterOptions{BufferSize: 8 << 20, MaxConcurrency: 2, ContentType: "application/octet-stream"}

// Failure is how a target failed, for the reason a backup gives.
type Failure int

const (
	// Unavailable: the store did not answer, or failed on its side.
	Unavailable Failure = iota
	// Refused: the store refused the credentials or the operation.
	Refused
	// NotFound: the bucket or container does not exist.
	NotFound
)

// Classify says how err, from a target, failed: by gocloud's error code,
// else by the HTTP status the store answered, whatever its SDK.
func Classify(err error) Failure {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return NotFound
	case gcerrors.PermissionDenied:
		return Refused
	}
	status := 0
	var withStatus interface{ HTTPStatusCode() int } // AWS
	var az *azcore.ResponseError
	var g *googleapi.Error
	switch {
	case errors.As(err, &withStatus):
		status = withStatus.HTTPStatusCode()
	case errors.As(err, &az):
		status = az.StatusCode
	case errors.As(err, &g):
		status = g.Code
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return Refused
	case http.StatusNotFound:
		return NotFound
	}
	return Unavailable
}
