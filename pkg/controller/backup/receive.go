package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"filippo.io/age"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/upload"
)

// Receive writes the snapshot body carries into the backup key names, an
// upload backup, on its cluster's backup target: encrypted to the
// cluster's recipients like any backup, its SHA-256 checked against
// spec.upload.digest once the last byte arrived. uploader is who sent it,
// for the record. It returns the backup as it ended, or an API error
// saying why nothing was written, or why what was written is gone again.
func (r *Runner) Receive(ctx context.Context, key types.NamespacedName, uploader string, body io.Reader) (*v1alpha1.TalosBackup, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if _, busy := r.receiving.LoadOrStore(key, stop); busy {
		return nil, apierrors.NewConflict(backupsResource, key.Name, errors.New("another upload of this backup is being received; wait for it to end"))
	}
	defer r.receiving.Delete(key)

	cluster, recipients, err := r.uploadTarget(ctx, key)
	if err != nil {
		return nil, err
	}
	b, err := r.beginUpload(ctx, key, uploader, cluster.Spec.Backup)
	if err != nil {
		return nil, err
	}
	events.Record(r.Recorder, b, cluster, v1alpha1.EventBackupStarted, "Upload", "receiving the etcd snapshot %s uploads", uploader)

	// The upload lasts as long as its uploader sends: its request, or a
	// deletion of the backup, ends it; not the runner's timeout. A body
	// that can be cut is cut when it ends, so that a read waiting on a
	// stalled uploader returns.
	if d, ok := body.(interface{ SetReadDeadline(time.Time) error }); ok {
		defer context.AfterFunc(ctx, func() { _ = d.SetReadDeadline(time.Now()) })()
	}
	out, runErr := r.receive(ctx, b, cluster, recipients, body)
	done := context.WithoutCancel(ctx)
	if runErr != nil {
		if err := r.failUpload(done, key, out, runErr); err != nil {
			return nil, err
		}
		return nil, uploadFailure(b, out.reason, runErr)
	}
	return r.endUpload(done, key, uploader, b, cluster, out)
}

// backupsResource names TalosBackups in the API errors an uploader gets.
var backupsResource = v1alpha1.Resource("talosbackups")

// uploadTarget reads the cluster of the upload backup key names, and the
// recipients its snapshot is encrypted to; what keeps the backup from
// taking an upload is an API error.
func (r *Runner) uploadTarget(ctx context.Context, key types.NamespacedName) (*v1alpha1.TalosCluster, []age.Recipient, error) {
	var b v1alpha1.TalosBackup
	if err := r.APIReader.Get(ctx, key, &b); err != nil {
		return nil, nil, err
	}
	if err := uploadable(&b); err != nil {
		return nil, nil, err
	}
	var cluster v1alpha1.TalosCluster
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &cluster); apierrors.IsNotFound(err) {
		return nil, nil, apierrors.NewConflict(backupsResource, b.Name, fmt.Errorf("TalosCluster %s does not exist in namespace %s", b.Spec.ClusterName, b.Namespace))
	} else if err != nil {
		return nil, nil, err
	}
	setting := cluster.Spec.Backup
	if setting == nil {
		return nil, nil, apierrors.NewConflict(backupsResource, b.Name, fmt.Errorf(
			"TalosCluster %s has no backup setting, so there is no target to write the snapshot to nor recipients to encrypt it to: an admin sets spec.backup through the talosclusters/backup subresource", cluster.Name))
	}
	recipients, err := archive.ParseRecipients(setting.Encryption.Recipients)
	if err != nil {
		return nil, nil, apierrors.NewConflict(backupsResource, b.Name, fmt.Errorf("TalosCluster %s: spec.backup.encryption: %w", cluster.Name, err))
	}
	return &cluster, recipients, nil
}

// beginUpload holds the backup key names with its finalizer and records it
// Running, with the target of setting, before the first byte is written:
// a deletion from then on stops the upload (stopReceiving) and then
// deletes whatever reached the target. Decided on the stored object, so
// that of two uploads only one begins.
func (r *Runner) beginUpload(ctx context.Context, key types.NamespacedName, uploader string, setting *v1alpha1.ClusterBackup) (*v1alpha1.TalosBackup, error) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s v1alpha1.TalosBackup
		if err := r.APIReader.Get(ctx, key, &s); err != nil {
			return err
		}
		if err := uploadable(&s); err != nil || controllerutil.ContainsFinalizer(&s, Finalizer) {
			return err
		}
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&s, Finalizer)
		return r.Client.SubResource("finalizers").Patch(ctx, &s, patch)
	})
	if err != nil {
		return nil, err
	}
	var b v1alpha1.TalosBackup
	err = r.setUploadStatus(ctx, key, func(s *v1alpha1.TalosBackup) error {
		if err := uploadable(s); err != nil {
			return err
		}
		now := metav1.NewMicroTime(r.Now())
		s.Status = v1alpha1.TalosBackupStatus{
			Phase: v1alpha1.BackupRunning, StartedAt: &now,
			Target: setting.Target.DeepCopy(), Recipients: slices.Clone(setting.Encryption.Recipients), Compression: setting.Compression,
			Conditions: s.Status.Conditions,
		}
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionUnknown,
			Reason: v1alpha1.BackupReasonUploading, Message: fmt.Sprintf("receiving the snapshot %s uploads", uploader)})
		b = *s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// endUpload records b, whose snapshot reached the target whole, as
// Succeeded; a backup deleted meanwhile loses what was written.
func (r *Runner) endUpload(ctx context.Context, key types.NamespacedName, uploader string, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster, out outcome) (*v1alpha1.TalosBackup, error) {
	f := out.files[0]
	err := r.setUploadStatus(ctx, key, func(s *v1alpha1.TalosBackup) error {
		if !s.DeletionTimestamp.IsZero() {
			return errDeleted
		}
		now := metav1.NewMicroTime(r.Now())
		s.Status.Phase = v1alpha1.BackupSucceeded
		s.Status.CompletedAt = &now
		s.Status.Location = out.location
		s.Status.Files = out.files
		s.Status.StoredSize = f.StoredSize
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionTrue,
			Reason: v1alpha1.BackupReasonUploaded, Message: fmt.Sprintf("the etcd snapshot %s uploaded (%d bytes, %s) is written to %s", uploader, f.ContentSize, f.Digest, out.location)})
		*b = *s
		return nil
	})
	if err != nil {
		// Deleted while its last bytes were written: its files go too,
		// as the deletion asked.
		r.cleanUp(ctx, b, out.location)
		return nil, apierrors.NewConflict(backupsResource, key.Name, fmt.Errorf("%w: nothing of the upload was kept", err))
	}
	events.Record(r.Recorder, b, cluster, v1alpha1.EventSnapshotUploaded, "Upload", "%s uploaded an etcd snapshot of %d bytes (%s); %d bytes stored at %s",
		uploader, f.ContentSize, f.Digest, b.Status.StoredSize, out.location)
	return b, nil
}

// cleanUp deletes the files an upload wrote whose record could not say so.
func (r *Runner) cleanUp(ctx context.Context, b *v1alpha1.TalosBackup, location string) {
	ctx, cancel := context.WithTimeout(ctx, 4*r.Options.CallTimeout)
	defer cancel()
	if err := r.deleteRecordedFiles(ctx, b); err != nil {
		events.Record(r.Recorder, b, nil, v1alpha1.EventBackupFailed, "Upload", "the files of a deleted upload are left at %s: %s", location, message(err))
	}
}

// deleteRecordedFiles deletes b's folder from the target its status records.
func (r *Runner) deleteRecordedFiles(ctx context.Context, b *v1alpha1.TalosBackup) error {
	target, _, err := r.open(ctx, b.Namespace, b.Spec.ClusterName, b.Status.Target)
	if err != nil {
		return err
	}
	defer target.Close()
	return target.Redact(r.deleteFolder(ctx, target, b.Name+"/"))
}

// uploadable refuses a backup that is not waiting for an upload, saying
// what to do instead.
func uploadable(b *v1alpha1.TalosBackup) error {
	gr := backupsResource
	switch {
	case !b.DeletionTimestamp.IsZero():
		return apierrors.NewConflict(gr, b.Name, errDeleted)
	case b.Spec.Upload == nil:
		return apierrors.NewBadRequest(upload.NotAnUpload(b.Name))
	case b.Status.Phase == v1alpha1.BackupSucceeded:
		return apierrors.NewConflict(gr, b.Name, errors.New("the backup already holds its uploaded snapshot; create another TalosBackup to upload another"))
	case b.Status.Phase == v1alpha1.BackupRunning:
		since := ""
		if b.Status.StartedAt != nil {
			since = " since " + b.Status.StartedAt.UTC().Format(time.RFC3339)
		}
		return apierrors.NewConflict(gr, b.Name, fmt.Errorf("an upload has been received%s; wait for it to end", since))
	}
	return nil
}

// receive streams body into the backup's folder and writes its manifest.
// On an error it deletes what it wrote and says why with a reason.
func (r *Runner) receive(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster, recipients []age.Recipient, body io.Reader) (out outcome, err error) {
	target, reason, err := r.open(ctx, b.Namespace, cluster.Name, b.Status.Target)
	if err != nil {
		out.reason = reason
		return out, err
	}
	defer target.Close()
	defer func() { err = target.Redact(err) }()
	folder := b.Name + "/"
	out.location = target.Location + folder
	w := &writer{target: target, folder: folder, recipients: recipients, compression: b.Status.Compression}
	defer func() {
		if err != nil {
			cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*r.Options.CallTimeout)
			defer cancel()
			out.leftovers = r.deleteFolder(cleanCtx, target, folder) != nil
		}
	}()
	if err = w.write(ctx, SnapshotFile, v1alpha1.BackupContentEtcdSnapshot, "", body); err != nil {
		var se *storeError
		switch {
		case ctx.Err() != nil:
			// The uploader went away, or the backup is being deleted:
			// whatever the writer then said, the stream stopped.
			out.reason = v1alpha1.BackupReasonUploadInterrupted
			err = fmt.Errorf("the upload stopped before its end (%v); nothing of it was kept", context.Cause(ctx))
		case errors.As(err, &se):
			out.reason = store.Reason(err)
		default:
			out.reason = v1alpha1.BackupReasonUploadInterrupted
			err = fmt.Errorf("the upload ended before its last byte: %w; nothing of it was kept", err)
		}
		return out, err
	}
	if got, want := w.files[0].Digest, b.Spec.Upload.Digest; got != want {
		out.reason = v1alpha1.BackupReasonDigestMismatch
		return out, fmt.Errorf("the uploaded %d bytes have SHA-256 %s, but spec.upload.digest is %s; nothing of them was kept: upload the file the digest was taken of",
			w.files[0].ContentSize, got, want)
	}
	if err = w.manifest(ctx, b, cluster); err != nil {
		out.reason = store.Reason(err)
		return out, err
	}
	out.files = w.files
	return out, nil
}

// uploadFailure is the API error an uploader gets for a failed upload: a
// 400 for bytes that are not what the backup said or a stream that broke,
// a 503 for a target that failed, the reason and the record's name in both.
func uploadFailure(b *v1alpha1.TalosBackup, reason string, err error) error {
	msg := fmt.Sprintf("%s (TalosBackup %s is Failed with reason %s; it takes another upload)", message(err), b.Name, reason)
	switch reason {
	case v1alpha1.BackupReasonDigestMismatch, v1alpha1.BackupReasonUploadInterrupted:
		return apierrors.NewBadRequest(msg)
	}
	return apierrors.NewServiceUnavailable(msg)
}
