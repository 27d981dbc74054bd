package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
)

// EventUploaded is the reason of the Event an uploaded snapshot leaves.
const EventUploaded = "SnapshotUploaded"

// awaitUpload says on a pending upload backup what it waits for. The
// runner takes no snapshot for it: Receive writes what an admin uploads.
func (r *Runner) awaitUpload(ctx context.Context, b *v1alpha1.TalosBackup) error {
	if b.Status.Phase != v1alpha1.BackupPending || meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded) != nil {
		return nil
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionUnknown,
		Reason: v1alpha1.BackupReasonAwaitingUpload,
		Message: fmt.Sprintf("waiting for an admin to upload the snapshot: POST talosbackups/%s/%s (ichor upload-snapshot %s --cluster %s -f FILE)",
			b.Name, v1alpha1.UploadSubresource, b.Name, b.Spec.ClusterName)})
	return client.IgnoreNotFound(r.Client.Status().Update(ctx, b))
}

// Receive writes the snapshot body carries into the backup key names, an
// upload backup, on its cluster's backup target: encrypted to the
// cluster's recipients like any backup, its SHA-256 checked against
// spec.upload.digest once the last byte arrived. uploader is who sent it,
// for the record. It returns the backup as it ended, or an API error
// saying why nothing was written, or why what was written is gone again.
func (r *Runner) Receive(ctx context.Context, key types.NamespacedName, uploader string, body io.Reader) (*v1alpha1.TalosBackup, error) {
	gr := v1alpha1.Resource("talosbackups")
	if _, busy := r.receiving.LoadOrStore(key, true); busy {
		return nil, apierrors.NewConflict(gr, key.Name, errors.New("another upload of this backup is being received; wait for it to end"))
	}
	defer r.receiving.Delete(key)

	var b v1alpha1.TalosBackup
	if err := r.APIReader.Get(ctx, key, &b); err != nil {
		return nil, err
	}
	if err := uploadable(&b); err != nil {
		return nil, err
	}
	var cluster v1alpha1.TalosCluster
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &cluster); apierrors.IsNotFound(err) {
		return nil, apierrors.NewConflict(gr, b.Name, fmt.Errorf("TalosCluster %s does not exist in namespace %s", b.Spec.ClusterName, b.Namespace))
	} else if err != nil {
		return nil, err
	}
	setting := cluster.Spec.Backup
	if setting == nil {
		return nil, apierrors.NewConflict(gr, b.Name, fmt.Errorf(
			"TalosCluster %s has no backup setting, so there is no target to write the snapshot to nor recipients to encrypt it to: an admin sets spec.backup through the talosclusters/backup subresource", cluster.Name))
	}
	recipients, err := archive.ParseRecipients(setting.Encryption.Recipients)
	if err != nil {
		return nil, apierrors.NewConflict(gr, b.Name, fmt.Errorf("TalosCluster %s: spec.backup.encryption: %w", cluster.Name, err))
	}

	if !controllerutil.ContainsFinalizer(&b, Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.AddFinalizer(&b, Finalizer)
		if err := r.Client.SubResource("finalizers").Patch(ctx, &b, patch); err != nil {
			return nil, fmt.Errorf("add the finalizer of TalosBackup %s: %w", b.Name, err)
		}
	}
	// Running, with the target, before the first byte is written: a
	// deletion from now on deletes whatever reached the target. The
	// update carries the resourceVersion read above, so of two uploads
	// racing from two processes one is refused here.
	now := metav1.NewMicroTime(r.Now())
	b.Status = v1alpha1.TalosBackupStatus{
		Phase: v1alpha1.BackupRunning, StartedAt: &now,
		Target: setting.Target.DeepCopy(), Recipients: slices.Clone(setting.Encryption.Recipients), Compression: setting.Compression,
		Conditions: b.Status.Conditions,
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionUnknown,
		Reason: v1alpha1.BackupReasonUploading, Message: fmt.Sprintf("receiving the snapshot %s uploads", uploader)})
	if err := r.Client.Status().Update(ctx, &b); err != nil {
		return nil, err
	}
	r.Recorder.Eventf(&b, &cluster, corev1.EventTypeNormal, EventStarted, "Upload", "receiving the etcd snapshot %s uploads", uploader)

	runCtx, cancel := context.WithTimeout(ctx, r.Options.Timeout)
	defer cancel()
	out, runErr := r.receive(runCtx, &b, &cluster, recipients, body)
	if runErr != nil {
		if out.leftovers {
			b.Status.Location = out.location
		} else {
			b.Status.Target = nil
		}
		if err := r.fail(context.WithoutCancel(ctx), &b, &cluster, out.reason, runErr); err != nil {
			return nil, err
		}
		return nil, uploadFailure(&b, out.reason, runErr)
	}
	done := metav1.NewMicroTime(r.Now())
	f := out.files[0]
	b.Status.Phase = v1alpha1.BackupSucceeded
	b.Status.CompletedAt = &done
	b.Status.Location = out.location
	b.Status.Files = out.files
	b.Status.StoredSize = f.StoredSize
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionTrue,
		Reason: v1alpha1.BackupReasonUploaded, Message: fmt.Sprintf("the etcd snapshot %s uploaded (%d bytes, %s) is written to %s", uploader, f.ContentSize, f.Digest, out.location)})
	if err := r.Client.Status().Update(context.WithoutCancel(ctx), &b); err != nil {
		return nil, err
	}
	r.Recorder.Eventf(&b, &cluster, corev1.EventTypeNormal, EventUploaded, "Upload", "%s uploaded an etcd snapshot of %d bytes (%s); %d bytes stored at %s",
		uploader, f.ContentSize, f.Digest, b.Status.StoredSize, out.location)
	return &b, nil
}

// uploadable refuses a backup that is not waiting for an upload, saying
// what to do instead.
func uploadable(b *v1alpha1.TalosBackup) error {
	gr := v1alpha1.Resource("talosbackups")
	switch {
	case !b.DeletionTimestamp.IsZero():
		return apierrors.NewConflict(gr, b.Name, errors.New("the backup is being deleted"))
	case b.Spec.Upload == nil:
		return apierrors.NewBadRequest(fmt.Sprintf(
			"TalosBackup %s is a backup the controller takes, not an upload: create a TalosBackup with spec.upload.digest to upload a snapshot", b.Name))
	case b.Status.Phase == v1alpha1.BackupSucceeded:
		return apierrors.NewConflict(gr, b.Name, errors.New("the backup already holds its uploaded snapshot; create another TalosBackup to upload another"))
	case b.Status.Phase == v1alpha1.BackupRunning:
		since := ""
		if b.Status.StartedAt != nil {
			since = " since " + b.Status.StartedAt.UTC().Format(time.RFC3339)
		}
		return apierrors.NewConflict(gr, b.Name, fmt.Errorf(
			"an upload has been received%s; if it was cut off (ichor-controller restarted), delete this TalosBackup and create it again", since))
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
		if errors.As(err, &se) {
			out.reason = store.Reason(err)
		} else {
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
// 400 for bytes that are not what the backup said, a 503 for a target that
// failed, the reason and the record's name in both.
func uploadFailure(b *v1alpha1.TalosBackup, reason string, err error) error {
	msg := fmt.Sprintf("%s (TalosBackup %s is Failed with reason %s)", message(err), b.Name, reason)
	switch reason {
	case v1alpha1.BackupReasonDigestMismatch, v1alpha1.BackupReasonUploadInterrupted:
		return apierrors.NewBadRequest(msg)
	}
	return apierrors.NewServiceUnavailable(msg)
}
