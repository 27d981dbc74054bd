package backup

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
)

// errDeleted stops an upload whose backup is deleted.
var errDeleted = errors.New("the TalosBackup is being deleted")

// Receiving uploads and running reconciles happen in the elected process
// only (the upload endpoint needs leader election, as the runner does), so
// an upload backup that is Running and not in r.receiving lost its upload
// with the process that received it.

// stopReceiving stops the upload into key, if this process receives one,
// and says whether it did.
func (r *Runner) stopReceiving(key types.NamespacedName) bool {
	v, ok := r.receiving.Load(key)
	if ok {
		v.(context.CancelCauseFunc)(errDeleted)
	}
	return ok
}

// settleUpload looks after an upload backup between uploads: it says on a
// pending one what it waits for, and fails one whose upload ended with the
// process that received it, deleting what reached the target. The runner
// takes no snapshot for it: Receive writes what an admin uploads.
func (r *Runner) settleUpload(ctx context.Context, key types.NamespacedName) error {
	if _, busy := r.receiving.Load(key); busy {
		return nil
	}
	var b v1alpha1.TalosBackup
	if err := r.APIReader.Get(ctx, key, &b); err != nil {
		return client.IgnoreNotFound(err)
	}
	switch b.Status.Phase {
	case v1alpha1.BackupPending, "":
		if meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded) != nil {
			return nil
		}
		return r.setUploadStatus(ctx, key, func(b *v1alpha1.TalosBackup) error {
			if b.Status.Phase != v1alpha1.BackupPending && b.Status.Phase != "" {
				return nil
			}
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionUnknown,
				Reason: v1alpha1.BackupReasonAwaitingUpload,
				Message: fmt.Sprintf("waiting for an admin to upload the snapshot: POST talosbackups/%s/%s (ichor upload-snapshot %s --cluster %s -f FILE)",
					b.Name, v1alpha1.UploadSubresource, b.Name, b.Spec.ClusterName)})
			return nil
		})
	case v1alpha1.BackupRunning:
		out := outcome{reason: v1alpha1.BackupReasonUploadInterrupted}
		if b.Status.Target != nil {
			if err := r.deleteRecordedFiles(ctx, &b); err != nil {
				return err // the files are deleted once the target answers
			}
		}
		return r.failUpload(ctx, key, out, errors.New("the upload ended with the ichor-controller that received it (restarted, or no longer the leader) before its last byte; nothing of it was kept: upload again"))
	}
	return nil
}

// setUploadStatus re-reads the backup and writes the status change sets,
// again on a conflict: an upload's status changes while labels,
// annotations or the schedule's own writes change the object, and only
// this process writes an upload's status meanwhile.
func (r *Runner) setUploadStatus(ctx context.Context, key types.NamespacedName, set func(*v1alpha1.TalosBackup) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var b v1alpha1.TalosBackup
		if err := r.APIReader.Get(ctx, key, &b); err != nil {
			return err
		}
		if err := set(&b); err != nil {
			return err
		}
		return r.Client.Status().Update(ctx, &b)
	})
}

// failUpload records an upload that failed, with a Warning Event on the
// backup (not on its cluster: the cluster's own backups did not fail).
func (r *Runner) failUpload(ctx context.Context, key types.NamespacedName, out outcome, cause error) error {
	msg := message(cause)
	var failed v1alpha1.TalosBackup
	err := r.setUploadStatus(ctx, key, func(b *v1alpha1.TalosBackup) error {
		now := metav1.NewMicroTime(r.Now())
		b.Status.Phase = v1alpha1.BackupFailed
		b.Status.CompletedAt = &now
		b.Status.Files, b.Status.StoredSize = nil, 0
		if out.leftovers {
			b.Status.Location = out.location // deleted with the record
		} else {
			b.Status.Target, b.Status.Location = nil, ""
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionFalse,
			Reason: out.reason, Message: msg})
		failed = *b
		return nil
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	events.Record(r.Recorder, &failed, nil, v1alpha1.EventBackupFailed, "Upload", "%s", msg)
	return nil
}
