package store

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/gcerrors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestVolumeTarget: a volume target is a directory under VolumeDir, with
// the prefix below it, and never leaves VolumeDir.
func TestVolumeTarget(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	target := &v1alpha1.BackupTarget{Volume: &v1alpha1.VolumeTarget{Path: "clusters/prod"}, Prefix: "nightly"}
	tg, err := Open(ctx, target, Options{VolumeDir: root, Folder: "team-a/prod/"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "file://" + filepath.ToSlash(root) + "/clusters/prod/nightly/team-a/prod/"; tg.Location != want {
		t.Fatalf("location %q, want %q", tg.Location, want)
	}
	if err := tg.WriteAll(ctx, "b1/etcd.snapshot.age", []byte("sealed"), WriterOptions); err != nil {
		t.Fatal(err)
	}
	// Deleting a backup's objects leaves directories, which go with the
	// folder once empty; a folder still holding a file stays.
	for _, key := range []string{"b2/machines/cp-1.yaml.age", "b3/etcd.snapshot.age"} {
		if err := tg.WriteAll(ctx, key, []byte("sealed"), WriterOptions); err != nil {
			t.Fatal(err)
		}
	}
	if err := tg.Delete(ctx, "b2/machines/cp-1.yaml.age"); err != nil {
		t.Fatal(err)
	}
	for _, folder := range []string{"b2/", "b3/", "never-written/"} {
		if err := tg.RemoveEmptyFolder(folder); err != nil {
			t.Fatalf("RemoveEmptyFolder(%s): %v", folder, err)
		}
	}
	base := filepath.Join(root, "clusters", "prod", "nightly", "team-a", "prod")
	if _, err := os.Stat(filepath.Join(base, "b2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied folder b2: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "b3", "etcd.snapshot.age")); err != nil {
		t.Fatalf("a folder with a file lost it: %v", err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "clusters", "prod", "nightly", "team-a", "prod", "b1", "etcd.snapshot.age"))
	if err != nil || string(data) != "sealed" {
		t.Fatalf("the file on the volume: %q, %v", data, err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "clusters", "prod", "nightly", "team-a", "prod", "b1"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the backup's directory holds %v (%v): no sidecar, no temporary file", entries, err)
	}

	for _, p := range []string{"../escape", "a/../../escape", "/abs", "", "a//b", "./a"} {
		target.Volume.Path = p
		if _, err := Open(ctx, target, Options{VolumeDir: root}); err == nil {
			t.Errorf("volume path %q was opened", p)
		}
	}
	target.Volume.Path = "ok"
	if _, err := Open(ctx, target, Options{}); err == nil || !strings.Contains(err.Error(), "--backup-volume-dir") {
		t.Fatalf("a volume target without --backup-volume-dir: %v", err)
	}
}

func TestOpenRefusesIncompleteCredentials(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		target v1alpha1.BackupTarget
		creds  map[string][]byte
		want   string
	}{
		{v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "b", Region: "r"}}, map[string][]byte{KeyS3AccessKeyID: []byte("id")}, KeyS3SecretAccessKey},
		{v1alpha1.BackupTarget{GCS: &v1alpha1.GCSTarget{Bucket: "b"}}, map[string][]byte{}, KeyGCSCredentials},
		{v1alpha1.BackupTarget{AzureBlob: &v1alpha1.AzureBlobTarget{StorageAccount: "acct01", Container: "c"}}, map[string][]byte{}, KeyAzureAccountKey},
		{v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "b", Region: "r", CABundle: "no pem"}}, map[string][]byte{KeyS3AccessKeyID: []byte("id"), KeyS3SecretAccessKey: []byte("s")}, "caBundle"},
		{v1alpha1.BackupTarget{}, nil, "names no store"},
	} {
		if _, err := Open(ctx, &c.target, Options{Credentials: c.creds}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.target, err, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	status := func(code int) error {
		return &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject",
			Err: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("api error")}}
	}
	for _, c := range []struct {
		err  error
		want Failure
	}{
		{status(http.StatusForbidden), Refused},
		{status(http.StatusUnauthorized), Refused},
		{status(http.StatusNotFound), NotFound},
		{status(http.StatusInternalServerError), Unavailable},
		{errors.New("dial tcp: connection refused"), Unavailable},
		{missingKey(t), NotFound},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// missingKey is the error of reading a key a bucket does not hold: gocloud's NotFound.
func missingKey(t *testing.T) error {
	b, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.ReadAll(context.Background(), "missing")
	if gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("reading a missing key: %v", err)
	}
	return err
}

// TestRedact: no credential value and no URL query reaches a message.
func TestRedact(t *testing.T) {
	tg := &Target{secrets: []string{"s3cr3t-key", "sv=2024&sig=abc%2Fdef"}}
	err := errors.New(`Put "https://acct.blob.core.windows.net/c/k?sv=2024&sig=abc%2Fdef": dial tcp: refused; key s3cr3t-key`)
	msg := tg.Redact(err).Error()
	for _, leak := range []string{"s3cr3t-key", "sig=", "abc%2Fdef"} {
		if strings.Contains(msg, leak) {
			t.Fatalf("%q leaks %q", msg, leak)
		}
	}
	if !strings.Contains(msg, "https://acct.blob.core.windows.net/c/k?<redacted>") {
		t.Fatalf("the message lost what it says: %q", msg)
	}
}

// TestAmbientCredentialsOnlyForListedBuckets: a target without a
// credentials Secret would use ichor-controller's own cloud identity; an
// admin of a namespace may point it only at a bucket the installation lists.
func TestAmbientCredentialsOnlyForListedBuckets(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	installation := &v1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
		Spec: v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{
			AmbientCredentialBuckets: []string{"s3:backups", "s3:minio.example.net:9000/backups", "gcs:backups"}}}}
	listed := fake.NewClientBuilder().WithScheme(scheme).WithObjects(installation).Build()
	none := fake.NewClientBuilder().WithScheme(scheme).Build()
	creds := &v1alpha1.LocalSecretReference{Name: "s3"}
	for _, c := range []struct {
		name   string
		target v1alpha1.BackupTarget
		reader client.Reader
		refuse string
	}{
		{"a listed AWS bucket", v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "backups", Region: "eu-west-1"}}, listed, ""},
		{"a listed bucket of an S3-compatible server", v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "backups", Endpoint: "https://minio.example.net:9000"}}, listed, ""},
		{"the same bucket name at another server", v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "backups", Endpoint: "https://evil.example:9000"}}, listed, "s3:evil.example:9000/backups"},
		{"an AWS bucket not listed", v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "someone-elses", Region: "eu-west-1"}}, listed, "s3:someone-elses"},
		{"an Azure container not listed", v1alpha1.BackupTarget{AzureBlob: &v1alpha1.AzureBlobTarget{StorageAccount: "acct", Container: "c"}}, listed, "azure:acct/c"},
		{"no installation", v1alpha1.BackupTarget{GCS: &v1alpha1.GCSTarget{Bucket: "backups"}}, none, "gcs:backups"},
		{"a target with its own credentials", v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{Bucket: "anything", CredentialsRef: creds}}, none, ""},
		{"a volume", v1alpha1.BackupTarget{Volume: &v1alpha1.VolumeTarget{Path: "p"}}, none, ""},
	} {
		err := checkAmbient(context.Background(), c.reader, &c.target)
		switch {
		case c.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse) || !strings.Contains(err.Error(), "ambientCredentialBuckets")):
			t.Errorf("%s: want a refusal naming %s and the setting, got %v", c.name, c.refuse, err)
		}
	}
}
