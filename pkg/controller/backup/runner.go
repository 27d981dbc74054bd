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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/secretsbundle"
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
	var cluster v1alpha1.TalosCluster
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &cluster)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.fail(ctx, &b, nil, v1alpha1.BackupReasonClusterNotFound,
			fmt.Errorf("TalosCluster %s does not exist in namespace %s", b.Spec.ClusterName, b.Namespace))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	setting := cluster.Spec.Backup
	if setting == nil {
		return ctrl.Result{}, r.fail(ctx, &b, &cluster, v1alpha1.BackupReasonNoBackupSetting,
			fmt.Errorf("TalosCluster %s has no backup setting: an admin sets spec.backup through the talosclusters/backup subresource", cluster.Name))
	}
	if b.Status.Phase == v1alpha1.BackupPending {
		if other, err := r.runningOn(ctx, &b); err != nil {
			return ctrl.Result{}, err
		} else if other != "" {
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
	}
	key := b.Namespace + "/" + b.Spec.ClusterName
	if _, busy := r.running.LoadOrStore(key, b.Name); busy {
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	defer r.running.Delete(key)
	// Decided on the stored backup, not the cache: a run of this process
	// that just ended may not be in the cache yet.
	if err := r.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() || b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{Requeue: !b.DeletionTimestamp.IsZero()}, nil
	}
	if !controllerutil.ContainsFinalizer(&b, Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.AddFinalizer(&b, Finalizer)
		if err := r.Client.SubResource("finalizers").Patch(ctx, &b, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add the finalizer of TalosBackup %s: %w", b.Name, err)
		}
	}
	if b.Status.Phase == v1alpha1.BackupPending || b.Status.Target == nil {
		now := metav1.NewMicroTime(r.Now())
		b.Status.Phase = v1alpha1.BackupRunning
		b.Status.StartedAt = &now
		b.Status.Target = setting.Target.DeepCopy()
		b.Status.Recipients = slices.Clone(setting.Encryption.Recipients)
		b.Status.Compression = setting.Compression
		if err := r.Client.Status().Update(ctx, &b); err != nil {
			return ctrl.Result{}, err
		}
		events.Record(r.Recorder, &b, &cluster, v1alpha1.EventBackupStarted, "Backup", "backing up TalosCluster %s", cluster.Name)
	}

	runCtx, cancel := context.WithTimeout(ctx, r.Options.Timeout)
	defer cancel()
	out, err := r.run(runCtx, &b, &cluster)
	if err != nil {
		if out.leftovers {
			// The files it could not delete go when the record does.
			b.Status.Location = out.location
		} else {
			b.Status.Target = nil
		}
		return ctrl.Result{}, r.fail(ctx, &b, &cluster, out.reason, err)
	}
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
	if err := r.Client.Status().Update(ctx, &b); err != nil {
		return ctrl.Result{}, err
	}
	events.Record(r.Recorder, &b, &cluster, v1alpha1.EventBackupSucceeded, "Backup", "%d files, %d bytes stored at %s", len(files), b.Status.StoredSize, location)
	return ctrl.Result{}, nil
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

// outcome is what run did: the files written and where, or why it failed
// and whether files it wrote are left on the target.
type outcome struct {
	files     []v1alpha1.BackupFile
	location  string
	reason    string
	leftovers bool
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

// run writes the backup's files and its manifest. On an error it deletes
// what it wrote, and says why with a reason.
func (r *Runner) run(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster) (out outcome, err error) {
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionBootstrapped) {
		out.reason = v1alpha1.BackupReasonNotBootstrapped
		return out, fmt.Errorf("TalosCluster %s is not bootstrapped: there is no etcd to back up yet", cluster.Name)
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		out.reason = v1alpha1.BackupReasonSecretsNotReady
		return out, err
	}
	recipients, err := archive.ParseRecipients(b.Status.Recipients)
	if err != nil {
		out.reason = v1alpha1.BackupReasonInvalidSetting
		return out, err
	}
	target, reason, err := r.open(ctx, b.Namespace, cluster.Name, b.Status.Target)
	if err != nil {
		out.reason = reason
		return out, err
	}
	defer target.Close()
	defer func() { err = target.Redact(err) }()
	folder := b.Name + "/"
	out.location = target.Location + folder

	machines, err := r.members(ctx, cluster)
	if err != nil {
		out.reason = v1alpha1.BackupReasonSnapshotFailed
		return out, err
	}
	w := &writer{target: target, folder: folder, recipients: recipients, compression: b.Status.Compression}
	defer func() {
		if err != nil {
			// The whole folder: an attempt before a restart may have
			// written files this one did not get to. Bounded, and not
			// cut short by the run's own deadline.
			cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*r.Options.CallTimeout)
			defer cancel()
			out.leftovers = r.deleteFolder(cleanCtx, target, folder) != nil
		}
	}()

	if out.reason, err = r.snapshot(ctx, w, bundle, machines); err != nil {
		return out, err
	}
	if err = r.configs(ctx, w, bundle, machines); err != nil {
		out.reason = v1alpha1.BackupReasonMachineConfigFailed
		return out, err
	}
	if err = w.manifest(ctx, b, cluster); err != nil {
		out.reason = store.Reason(err)
		return out, err
	}
	out.files = w.files
	return out, nil
}

// open opens a backup target, reading its credentials Secret in namespace.
func (r *Runner) open(ctx context.Context, namespace, cluster string, t *v1alpha1.BackupTarget) (*store.Target, string, error) {
	return store.OpenForCluster(ctx, r.Secrets, namespace, cluster, t, r.Options.VolumeDir, r.Options.CallTimeout)
}

// members are the cluster's configured machines, control planes first.
func (r *Runner) members(ctx context.Context, cluster *v1alpha1.TalosCluster) ([]*v1alpha1.TalosMachine, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
		return nil, fmt.Errorf("list the machines of TalosCluster %s: %w", cluster.Name, err)
	}
	var out []*v1alpha1.TalosMachine
	for i := range list.Items {
		m := &list.Items[i]
		if clusterindex.Member(m) && m.Status.AppliedConfig != nil {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.TalosMachine) int {
		if (a.Spec.Role == v1alpha1.MachineRoleControlPlane) != (b.Spec.Role == v1alpha1.MachineRoleControlPlane) {
			if a.Spec.Role == v1alpha1.MachineRoleControlPlane {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// snapshot writes an etcd snapshot from the first control plane that
// gives one, Ready ones first, with an os:etcd:backup certificate.
func (r *Runner) snapshot(ctx context.Context, w *writer, bundle *secretsbundle.Secrets, machines []*v1alpha1.TalosMachine) (string, error) {
	creds, err := bundle.TalosCredentials(role.MakeSet(role.EtcdBackup), r.Now(), r.Options.CredentialTTL)
	if err != nil {
		return v1alpha1.BackupReasonSecretsNotReady, err
	}
	var cps []*v1alpha1.TalosMachine
	for _, m := range machines {
		if m.Spec.Role == v1alpha1.MachineRoleControlPlane {
			cps = append(cps, m)
		}
	}
	slices.SortStableFunc(cps, func(a, b *v1alpha1.TalosMachine) int {
		ar, br := a.Status.Phase == v1alpha1.MachinePhaseReady, b.Status.Phase == v1alpha1.MachinePhaseReady
		switch {
		case ar && !br:
			return -1
		case br && !ar:
			return 1
		}
		return 0
	})
	if len(cps) == 0 {
		return v1alpha1.BackupReasonSnapshotFailed, errors.New("the cluster has no configured control plane to take an etcd snapshot from")
	}
	var tried []string
	for _, m := range cps {
		err := func() error {
			dialCtx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
			node, err := r.Dialer.Configured(dialCtx, m.Spec.Address, creds)
			cancel()
			if err != nil {
				return err
			}
			defer node.Close()
			rc, err := node.EtcdSnapshot(ctx)
			if err != nil {
				return err
			}
			defer rc.Close()
			return w.write(ctx, SnapshotFile, v1alpha1.BackupContentEtcdSnapshot, m.Name, rc)
		}()
		if err == nil {
			return "", nil
		}
		var se *storeError
		if errors.As(err, &se) {
			// The target refused: another control plane will not change that.
			return store.Reason(err), err
		}
		log.FromContext(ctx).Info("etcd snapshot failed; trying the next control plane", "machine", m.Name, "error", err.Error())
		tried = append(tried, fmt.Sprintf("%s: %v", m.Name, err))
	}
	return v1alpha1.BackupReasonSnapshotFailed, fmt.Errorf("no control plane gave an etcd snapshot: %s", strings.Join(tried, "; "))
}

// configs writes every machine's running config, read with an os:admin
// certificate (Talos lets no other role read it).
func (r *Runner) configs(ctx context.Context, w *writer, bundle *secretsbundle.Secrets, machines []*v1alpha1.TalosMachine) error {
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), r.Now(), r.Options.CredentialTTL)
	if err != nil {
		return err
	}
	for _, m := range machines {
		err := func() error {
			callCtx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
			defer cancel()
			node, err := r.Dialer.Configured(callCtx, m.Spec.Address, creds)
			if err != nil {
				return err
			}
			defer node.Close()
			cfg, err := node.Config(callCtx)
			if err != nil {
				return err
			}
			return w.write(ctx, MachineDir+m.Name+machineSuffix, v1alpha1.BackupContentMachineConfig, m.Name, strings.NewReader(string(cfg)))
		}()
		if err != nil {
			return fmt.Errorf("the running config of %s: %w", m.Name, err)
		}
	}
	return nil
}

// writer writes one backup's files into its folder of a target.
type writer struct {
	target      *store.Target
	folder      string
	recipients  []age.Recipient
	compression v1alpha1.BackupCompression
	files       []v1alpha1.BackupFile
}

// storeError is a failure of the target, not of the content's source.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// write streams content into the file name (the extension added).
func (w *writer) write(ctx context.Context, name string, content v1alpha1.BackupContent, machine string, src io.Reader) error {
	name += archive.Extension(w.compression)
	key := w.folder + name
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := w.target.NewWriter(ctx, key, store.WriterOptions)
	if err != nil {
		return &storeError{store.Explain(err)}
	}
	source := &readErr{r: src}
	sum, err := archive.Write(bw, source, w.recipients, w.compression)
	if err != nil {
		cancel() // a writer closed after its context ends discards what it got
		_ = bw.Close()
		if source.err != nil {
			return err // the node's stream broke, not the target
		}
		return &storeError{store.Explain(err)}
	}
	if err := bw.Close(); err != nil {
		return &storeError{store.Explain(err)}
	}
	w.files = append(w.files, v1alpha1.BackupFile{
		Name: name, Content: content, Machine: machine,
		StoredSize: sum.Size, ContentSize: sum.ContentSize, Digest: sum.Digest,
	})
	return nil
}

// readErr remembers the error its reader returned, other than io.EOF: what
// failed, the content's source or the target.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// Manifest is backup.json: what a backup holds, for whoever restores it
// without the TalosBackup object. It holds no secret.
type Manifest struct {
	Backup      string                     `json:"backup"`
	Namespace   string                     `json:"namespace"`
	Cluster     string                     `json:"cluster"`
	StartedAt   time.Time                  `json:"startedAt"`
	Recipients  []string                   `json:"recipients"`
	Compression v1alpha1.BackupCompression `json:"compression"`
	Files       []v1alpha1.BackupFile      `json:"files"`
}

func (w *writer) manifest(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster) error {
	m := Manifest{Backup: b.Name, Namespace: b.Namespace, Cluster: cluster.Name, Recipients: b.Status.Recipients,
		Compression: b.Status.Compression, Files: w.files}
	if b.Status.StartedAt != nil {
		m.StartedAt = b.Status.StartedAt.UTC()
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	key := w.folder + ManifestFile
	if err := w.target.WriteAll(ctx, key, append(data, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return &storeError{store.Explain(err)}
	}
	return nil
}

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
