package backup

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/events"
)

// deleteFiles deletes a deleted backup's files from the target its status
// records, then lets the object go. A backup that never got a target has
// no files.
func (r *Runner) deleteFiles(ctx context.Context, b *v1alpha1.TalosBackup) error {
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		return nil
	}
	if t := b.Status.Target; t != nil && b.Annotations[v1alpha1.AnnotationKeepFiles] == "true" {
		events.Record(r.Recorder, b, nil, v1alpha1.EventBackupFilesKept, "Delete",
			"deleted without its files, as annotated %s: they stay at %s", v1alpha1.AnnotationKeepFiles, b.Status.Location)
	} else if t != nil {
		target, reason, err := r.open(ctx, b.Namespace, b.Spec.ClusterName, t)
		if reason == v1alpha1.BackupReasonBucketNotFound {
			err = nil // the bucket went, and the files with it
		} else if err == nil {
			defer target.Close()
			err = target.Redact(r.deleteFolder(ctx, target, b.Name+"/"))
		}
		if err != nil {
			msg := message(err) +
				"; an admin who gives up on these files annotates the backup " + v1alpha1.AnnotationKeepFiles + "=true"
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionFilesDeleted, Status: metav1.ConditionFalse,
				Reason: v1alpha1.BackupReasonDeleteFailed, Message: msg})
			if uerr := r.Client.Status().Update(ctx, b); uerr != nil {
				return uerr
			}
			return fmt.Errorf("delete the files of TalosBackup %s/%s: %w", b.Namespace, b.Name, err)
		}
		events.Record(r.Recorder, b, nil, v1alpha1.EventBackupFilesDeleted, "Delete", "deleted the files at %s", b.Status.Location)
	}
	patch := client.MergeFrom(b.DeepCopy())
	controllerutil.RemoveFinalizer(b, Finalizer)
	return client.IgnoreNotFound(r.Client.SubResource("finalizers").Patch(ctx, b, patch))
}

// deleteFolder deletes every object under folder, the manifest last, and
// on a volume the directories left empty.
func (r *Runner) deleteFolder(ctx context.Context, target *store.Target, folder string) error {
	var keys []string
	it := target.List(&blob.ListOptions{Prefix: folder})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return store.Explain(err)
		}
		keys = append(keys, obj.Key)
	}
	slices.SortStableFunc(keys, func(a, b string) int {
		am, bm := strings.HasSuffix(a, "/"+ManifestFile), strings.HasSuffix(b, "/"+ManifestFile)
		switch {
		case am && !bm:
			return 1
		case bm && !am:
			return -1
		}
		return 0
	})
	for _, key := range keys {
		callCtx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
		err := target.Delete(callCtx, key)
		cancel()
		if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return store.Explain(err)
		}
	}
	return target.RemoveEmptyFolder(folder)
}
