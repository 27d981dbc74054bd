package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// OpenForCluster opens t for the backups of cluster in namespace: it reads
// the target's credentials Secret there (with secrets, uncached), or, for
// a target without one, checks that the installation lets backups reach
// its bucket with the controller's own identity; it opens the cluster's
// folder below the target's prefix, and checks, within timeout, that the
// bucket is there and the credentials open it. On failure it returns the
// BackupReason of the condition to set.
func OpenForCluster(ctx context.Context, secrets client.Reader, namespace, cluster string, t *v1alpha1.BackupTarget,
	volumeDir string, timeout time.Duration,
) (*Target, string, error) {
	if err := checkAmbient(ctx, secrets, t); err != nil {
		return nil, v1alpha1.BackupReasonAmbientCredentialsRefused, err
	}
	opts := Options{VolumeDir: volumeDir, Folder: namespace + "/" + cluster + "/"}
	if ref := CredentialsRef(t); ref != nil {
		var s corev1.Secret
		if err := secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, v1alpha1.BackupReasonCredentialsNotFound, fmt.Errorf("the backup target's credentials Secret %s does not exist in namespace %s", ref.Name, namespace)
			}
			return nil, v1alpha1.BackupReasonCredentialsNotFound, fmt.Errorf("read the backup target's credentials Secret %s: %w", ref.Name, err)
		}
		opts.Credentials = s.Data
		if opts.Credentials == nil {
			opts.Credentials = map[string][]byte{}
		}
	}
	target, err := Open(ctx, t, opts)
	if err != nil {
		return nil, v1alpha1.BackupReasonInvalidSetting, fmt.Errorf("open the backup target: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, err := target.IsAccessible(callCtx)
	if err == nil && !ok {
		err = fmt.Errorf("the bucket or container of %s does not exist", target.Location)
		return nil, v1alpha1.BackupReasonBucketNotFound, errors.Join(err, target.Close())
	}
	if err != nil {
		err = Explain(err)
		return nil, Reason(err), errors.Join(err, target.Close())
	}
	return target, "", nil
}

// checkAmbient refuses a target that would use ichor-controller's own
// cloud identity (no credentialsRef) for a bucket the installation does
// not list in spec.settings.ambientCredentialBuckets: that identity is the
// installation's, and an admin of one namespace must not send backups, or
// read them back, wherever it reaches.
func checkAmbient(ctx context.Context, reader client.Reader, t *v1alpha1.BackupTarget) error {
	bucket, ambient := v1alpha1.AmbientBucket(t)
	if !ambient {
		return nil
	}
	var in v1alpha1.IchorInstallation
	err := reader.Get(ctx, client.ObjectKey{Name: v1alpha1.InstallationName}, &in)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read IchorInstallation %s: %w", v1alpha1.InstallationName, err)
	}
	if slices.Contains(in.Spec.Settings.AmbientCredentialBuckets, bucket) {
		return nil
	}
	return fmt.Errorf("the backup target names no credentialsRef, so it would use ichor-controller's own cloud identity, "+
		"and the installation does not let backups reach %s with it: name a credentials Secret, or an admin of the installation adds %q "+
		"to the IchorInstallation's spec.settings.ambientCredentialBuckets", bucket, bucket)
}

// Explain words a target's error for people: what it means here, then the
// store's own error.
func Explain(err error) error {
	switch Classify(err) {
	case NotFound:
		return fmt.Errorf("the bucket or container does not exist: %w", err)
	case Refused:
		return fmt.Errorf("the target refused: check the credentials Secret and what they may do: %w", err)
	}
	return fmt.Errorf("the backup target did not answer as it should: %w", err)
}

// Reason is the BackupReason of a target's error.
func Reason(err error) string {
	switch Classify(err) {
	case NotFound:
		return v1alpha1.BackupReasonBucketNotFound
	case Refused:
		return v1alpha1.BackupReasonTargetRefused
	}
	return v1alpha1.BackupReasonTargetUnavailable
}
