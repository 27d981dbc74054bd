// Package backup runs TalosBackups and each cluster's backup schedule.
//
// Runner takes a Pending TalosBackup, one per cluster at a time: it takes
// an etcd snapshot from a control plane with an os:etcd:backup certificate
// (the narrowest role that can) and reads every machine's running config
// (os:admin: Talos marks it sensitive), and streams each through
// pkg/backup/archive (digest, zstd, age) into the cluster's backup target.
// A manifest (backup.json, no secret in it) is written last, so a folder
// without one is an incomplete backup. The controller holds no identity
// that decrypts what it wrote. Each backup is the folder
// <prefix><namespace>/<cluster>/<backup>/ of the target.
//
// A backup the controller was running when it stopped is run again from the
// start: it changes no node, and its files are written over. A backup that
// fails deletes its folder. Deleting a TalosBackup deletes its files from
// the target recorded in its status (the finalizer ichor.dev/backup-files),
// unless an admin annotated it ichor.dev/keep-files.
//
// Scheduler (schedule.go) creates TalosBackups on each cluster's schedule,
// applies the retention after a backup succeeded, and reports the latest
// backup on the cluster.
package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// RunnerName names the runner in logs, metrics and Events.
const RunnerName = "talosbackup"

// Finalizer holds a TalosBackup until its files are deleted from its target.
const Finalizer = "ichor.dev/backup-files"

// The names of a backup's files, below its folder.
const (
	SnapshotFile  = "etcd.snapshot"
	MachineDir    = "machines/"
	ManifestFile  = "backup.json"
	machineSuffix = ".yaml"
)

// Options tune the runner; zero values take the defaults.
type Options struct {
	// VolumeDir is where volume targets are (--backup-volume-dir); empty refuses them.
	VolumeDir string
	// Timeout bounds one backup. Default 1h.
	Timeout time.Duration
	// CallTimeout bounds one short call (a machine's config, a delete). Default 30s.
	CallTimeout time.Duration
	// CredentialTTL is the lifetime of the Talos certificates minted per backup. Default 10m.
	CredentialTTL time.Duration
	// PollInterval is how often a backup waiting for another one of its cluster looks again. Default 2s.
	PollInterval time.Duration
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.Timeout, time.Hour)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	defaults.Positive(&o.PollInterval, 2*time.Second)
	return o
}

// Runner runs TalosBackups.
type Runner struct {
	// Client reads (cached) and writes Ichor objects.
	Client client.Client
	// APIReader reads a backup uncached before it runs: a cached copy may
	// still say Running after the run that succeeded, and a second run
	// would overwrite the files the record describes.
	APIReader client.Reader
	// Secrets reads the bundle and credentials Secrets, uncached.
	Secrets client.Reader
	// Dialer opens sessions with nodes.
	Dialer talos.Dialer
	// Recorder records Events.
	Recorder events.EventRecorder
	// Options tune it.
	Options Options
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	// running holds the clusters (namespace/name) a backup is being
	// written for, in this process: with runningOn, which sees other
	// processes' through the API, one backup per cluster at a time.
	running sync.Map
	// receiving holds the upload backups (types.NamespacedName) whose
	// snapshot this process is receiving, each with the
	// context.CancelCauseFunc that stops it.
	receiving sync.Map
}

// SetupWithManager registers the runner.
func (r *Runner) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(RunnerName).
		For(&v1alpha1.TalosBackup{}).
		// Backups of different clusters run side by side, and a long one
		// leaves room for deletions.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// Reconcile runs a pending backup, or deletes a deleted one's files.
func (r *Runner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b v1alpha1.TalosBackup
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("cluster", b.Spec.ClusterName))
	switch {
	case !b.DeletionTimestamp.IsZero():
		if r.stopReceiving(req.NamespacedName) {
			// Its files are deleted once the upload stopped and cleaned up.
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
		return ctrl.Result{}, r.deleteFiles(ctx, &b)
	case b.Spec.Upload != nil:
		return ctrl.Result{}, r.settleUpload(ctx, req.NamespacedName)
	case b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed:
		return ctrl.Result{}, nil
	}
	cluster, err := r.clusterOf(ctx, &b)
	if cluster == nil || err != nil {
		return ctrl.Result{}, err
	}
	return r.runInTurn(ctx, req.NamespacedName, &b, cluster)
}

// clusterOf reads b's cluster, which has a backup setting; without either,
// b fails, and clusterOf returns no cluster.
func (r *Runner) clusterOf(ctx context.Context, b *v1alpha1.TalosBackup) (*v1alpha1.TalosCluster, error) {
	var cluster v1alpha1.TalosCluster
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &cluster)
	if apierrors.IsNotFound(err) {
		return nil, r.fail(ctx, b, nil, v1alpha1.BackupReasonClusterNotFound,
			fmt.Errorf("TalosCluster %s does not exist in namespace %s", b.Spec.ClusterName, b.Namespace))
	}
	if err != nil {
		return nil, err
	}
	if cluster.Spec.Backup == nil {
		return nil, r.fail(ctx, b, &cluster, v1alpha1.BackupReasonNoBackupSetting,
			fmt.Errorf("TalosCluster %s has no backup setting: an admin sets spec.backup through the talosclusters/backup subresource", cluster.Name))
	}
	return &cluster, nil
}

// runInTurn runs b once no other backup of its cluster runs, here or in
// another process, and records how it ended.
func (r *Runner) runInTurn(ctx context.Context, key types.NamespacedName, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster) (ctrl.Result, error) {
	if b.Status.Phase == v1alpha1.BackupPending {
		if other, err := r.runningOn(ctx, b); err != nil {
			return ctrl.Result{}, err
		} else if other != "" {
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
	}
	turn := b.Namespace + "/" + b.Spec.ClusterName
	if _, busy := r.running.LoadOrStore(turn, b.Name); busy {
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	defer r.running.Delete(turn)
	// Decided on the stored backup, not the cache: a run of this process
	// that just ended may not be in the cache yet.
	if err := r.APIReader.Get(ctx, key, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() || b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{Requeue: !b.DeletionTimestamp.IsZero()}, nil
	}
	if err := r.start(ctx, b, cluster); err != nil {
		return ctrl.Result{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, r.Options.Timeout)
	defer cancel()
	out, err := r.run(runCtx, b, cluster)
	if err != nil {
		if out.leftovers {
			// The files it could not delete go when the record does.
			b.Status.Location = out.location
		} else {
			b.Status.Target = nil
		}
		return ctrl.Result{}, r.fail(ctx, b, cluster, out.reason, err)
	}
	return ctrl.Result{}, r.succeed(ctx, b, cluster, out)
}

// start holds b with its finalizer, so that its files go with it, and
// records it Running with the target, recipients and compression its
// cluster's setting names: what the run writes with.
func (r *Runner) start(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster) error {
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.AddFinalizer(b, Finalizer)
		if err := r.Client.SubResource("finalizers").Patch(ctx, b, patch); err != nil {
			return fmt.Errorf("add the finalizer of TalosBackup %s: %w", b.Name, err)
		}
	}
	if b.Status.Phase != v1alpha1.BackupPending && b.Status.Target != nil {
		return nil // running since before a restart: run again, as recorded
	}
	setting := cluster.Spec.Backup
	now := metav1.NewMicroTime(r.Now())
	b.Status.Phase = v1alpha1.BackupRunning
	b.Status.StartedAt = &now
	b.Status.Target = setting.Target.DeepCopy()
	b.Status.Recipients = slices.Clone(setting.Encryption.Recipients)
	b.Status.Compression = setting.Compression
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return err
	}
	events.Record(r.Recorder, b, cluster, v1alpha1.EventBackupStarted, "Backup", "backing up TalosCluster %s", cluster.Name)
	return nil
}

// succeed records b as Succeeded with the files its run wrote.
func (r *Runner) succeed(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster, out outcome) error {
	files, location := out.files, out.location
	now := metav1.NewMicroTime(r.Now())
	b.Status.Phase = v1alpha1.BackupSucceeded
	b.Status.CompletedAt = &now
	b.Status.Location = location
	b.Status.Files = files
	b.Status.StoredSize = 0
	for _, f := range files {
		b.Status.StoredSize += f.StoredSize
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionTrue,
		Reason: v1alpha1.BackupReasonWritten, Message: fmt.Sprintf("%d files written to %s", len(files), location)})
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return err
	}
	events.Record(r.Recorder, b, cluster, v1alpha1.EventBackupSucceeded, "Backup", "%d files, %d bytes stored at %s", len(files), b.Status.StoredSize, location)
	return nil
}

// runningOn names another running backup of b's cluster, if any: backups of
// one cluster run one at a time, oldest first.
func (r *Runner) runningOn(ctx context.Context, b *v1alpha1.TalosBackup) (string, error) {
	var list v1alpha1.TalosBackupList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(b.Namespace, b.Spec.ClusterName)...); err != nil {
		return "", err
	}
	for _, o := range list.Items {
		if o.Name == b.Name || !o.DeletionTimestamp.IsZero() || o.Spec.Upload != nil {
			continue
		}
		older := o.CreationTimestamp.Before(&b.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&b.CreationTimestamp) && o.Name < b.Name)
		if o.Status.Phase == v1alpha1.BackupRunning || (o.Status.Phase == v1alpha1.BackupPending && older) {
			return o.Name, nil
		}
	}
	return "", nil
}

// fail records b as Failed with reason, with Warning Events on it and its
// cluster (when known), saying err as message does.
func (r *Runner) fail(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster, reason string, err error) error {
	if reason == "" {
		reason = v1alpha1.BackupReasonTargetUnavailable
	}
	err = errors.New(message(err))
	now := metav1.NewMicroTime(r.Now())
	b.Status.Phase = v1alpha1.BackupFailed
	b.Status.CompletedAt = &now
	b.Status.Files = nil
	b.Status.StoredSize = 0
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionFalse,
		Reason: reason, Message: err.Error()})
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return err
	}
	if cluster == nil {
		events.Record(r.Recorder, b, nil, v1alpha1.EventBackupFailed, "Backup", "%s", err.Error())
		return nil
	}
	events.Record(r.Recorder, b, cluster, v1alpha1.EventBackupFailed, "Backup", "%s", err.Error())
	events.Record(r.Recorder, cluster, b, v1alpha1.EventBackupFailed, "Backup", "TalosBackup %s failed: %s", b.Name, err.Error())
	return nil
}

// maxMessage bounds a failure's message: a condition holds 32 KiB, an
// Event's note 1 KiB, and a person reads the start.
const maxMessage = 1000

// message is err as status and Events say it: without any URL query (a
// store's SDK may quote a signed URL) and cut to maxMessage.
func message(err error) string {
	s := store.RedactMessage(err.Error())
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-len("…")] + "…"
}
