package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bytesize"
)

func newUpload(o *Options) *cobra.Command {
	var cluster, file string
	cmd := &cobra.Command{
		Use:   "upload-snapshot BACKUP --cluster CLUSTER -f FILE",
		Short: "Upload an etcd snapshot taken elsewhere into a TalosBackup, for an etcd-restore (admins)",
		Long: `upload-snapshot reads FILE once for its SHA-256, creates the TalosBackup BACKUP of CLUSTER
with that digest in spec.upload (or takes the one that exists with the same digest and failed or
waits), and streams FILE through ichor-apiserver to ichor-controller, which writes it to the
cluster's backup target, encrypted to the cluster's backup recipients. Bytes that arrive with
another digest are refused and nothing of them is kept. An etcd-restore then names BACKUP.`,
		Example: `  talosctl -n 10.5.0.2 etcd snapshot db.snapshot
  ichor -n demo upload-snapshot before-upgrade --cluster demo -f db.snapshot`,
		GroupID: "operations",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the TalosCluster the snapshot is restored into")
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the etcd snapshot (talosctl etcd snapshot, etcdctl snapshot save)")
	_ = cmd.MarkFlagRequired("cluster")
	_ = cmd.MarkFlagRequired("filename")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, name := cmd.Context(), args[0]
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close() //nolint:errcheck
		info, err := f.Stat()
		if err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("read %s: %w", file, err)
		}
		digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}

		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		// Asked first, so that a refused upload leaves no backup behind.
		kube, err := o.kube()
		if err != nil {
			return err
		}
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "create", Group: v1alpha1.GroupName, Resource: "talosbackups", Subresource: v1alpha1.UploadSubresource, Name: name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !review.Status.Allowed {
			return apierrors.NewForbidden(v1alpha1.Resource("talosbackups"), name, fmt.Errorf(
				`you cannot create resource "talosbackups/%s" in API group %q in the namespace %q`, v1alpha1.UploadSubresource, v1alpha1.GroupName, ns))
		}
		backups := c.IchorV1alpha1().TalosBackups(ns)
		_, err = backups.Create(ctx, &v1alpha1.TalosBackup{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.TalosBackupSpec{ClusterName: cluster, Upload: &v1alpha1.BackupUpload{Digest: digest}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			b, gerr := backups.Get(ctx, name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if b.Spec.Upload == nil || b.Spec.Upload.Digest != digest || b.Spec.ClusterName != cluster {
				return fmt.Errorf("TalosBackup %s exists and is not an upload of %s (%s) for TalosCluster %s: name another backup", name, file, digest, cluster)
			}
		} else if err != nil {
			return err
		}

		start := time.Now()
		progress := newProgress(o, "upload "+name)
		var b v1alpha1.TalosBackup
		err = c.IchorV1alpha1().RESTClient().Post().Namespace(ns).Resource("talosbackups").Name(name).SubResource(v1alpha1.UploadSubresource).
			SetHeader("Content-Type", "application/octet-stream").
			Body(io.TeeReader(f, progress)).Do(ctx).Into(&b)
		_ = progress.Finish()
		if err != nil {
			return err
		}
		elapsed := time.Since(start)
		fmt.Fprintf(o.ErrOut, "%s: %s (%s) in %s (%s/s), stored at %s\n", file, bytesize.Format(info.Size()), digest,
			elapsed.Round(time.Millisecond), bytesize.Format(int64(float64(info.Size())/max(elapsed.Seconds(), 1e-3))), b.Status.Location)
		fmt.Fprintf(o.Out, "talosbackup.ichor.dev/%s uploaded\n", name)
		return nil
	}
	return cmd
}
