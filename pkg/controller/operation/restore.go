package operation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/etcd/snapshot"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// An etcd-restore puts a TalosBackup's etcd snapshot back into the running
// cluster. Nothing is touched before the snapshot was fetched, decrypted
// with the identity the admin named and checked against the SHA-256 the
// backup recorded: a wrong identity or a corrupt file fails the operation
// with every member intact. The verified snapshot is kept in the
// controller's scratch directory until the operation ends or is deleted
// (fetched and checked again if the controller restarted meanwhile), and
// no longer: a snapshot refused is removed at once, the operation holds
// its finalizer from before the fetch, and the directory is swept of what
// no operation needs when the controller starts (sweepScratch).
//
// Then, in restoreSteps' order: the other control planes leave etcd (their
// etcd stays stopped until they reboot), the first control plane's
// EPHEMERAL partition is wiped (with it the last member, so the old etcd
// cluster is gone and nothing can join it), then the others', the snapshot
// is uploaded to the first and etcd bootstrapped from it, and the step
// ends only once the cluster's kube-apiserver serves the snapshot's data:
// the snapshot's revision, and kube-system's resourceVersion as the
// snapshot last wrote it. The others join, and every worker's kubelet is
// restarted, so that none keeps watching from revisions the cluster no
// longer has.

// restoreMarkerKey is the etcd key whose last write in the snapshot the
// recovered cluster must report: kube-system's Namespace, which every
// cluster has and nothing rewrites.
const (
	restoreMarkerNamespace = metav1.NamespaceSystem
	restoreMarkerKey       = "/registry/namespaces/" + restoreMarkerNamespace
)

// restoreSteps are an etcd-restore's steps over the targets, control planes
// first: the first control plane is the one the snapshot is recovered on.
func restoreSteps(targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	cps, workers := byRole(targets)
	if len(cps) == 0 {
		return nil
	}
	var steps []v1alpha1.OperationStep
	add := func(action v1alpha1.StepAction, machines ...string) {
		for _, m := range machines {
			steps = append(steps, v1alpha1.OperationStep{Machine: m, Action: action, Phase: v1alpha1.OperationPending})
		}
	}
	first, others := cps[0], cps[1:]
	add(v1alpha1.ActionLeaveEtcd, others...)
	add(v1alpha1.ActionWipeEtcd, first)
	add(v1alpha1.ActionWipeEtcd, others...)
	add(v1alpha1.ActionRecoverEtcd, first)
	add(v1alpha1.ActionJoinEtcd, others...)
	add(v1alpha1.ActionRestartKubelet, workers...)
	return steps
}

// checkRestore refuses an etcd-restore before anything moves: a backup
// that is not a succeeded backup of this cluster with an etcd snapshot, an
// identity Secret that is missing or holds no age identity of the backup's
// recipients, a snapshot whose SHA-256 differs from the recorded one,
// control planes whose config is not final, and a node at a target's
// address that is not that machine (checkRestoreNodes).
func (r *Reconciler) checkRestore(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	if len(restoreSteps(targets)) == 0 {
		return fmt.Sprintf("TalosCluster %s has no configured control plane to restore etcd on", cluster.Name), nil
	}
	for _, m := range targets {
		if render.MachineRole(m) == v1alpha1.MachineRoleControlPlane && !meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied) {
			return fmt.Sprintf("TalosMachine %s has not applied its current config yet; etcd is restored once every control plane's config is final", m.Name), nil
		}
	}
	if refused, err := r.checkRestoreNodes(ctx, cluster, targets); refused != "" || err != nil {
		return refused, err
	}
	_, refused, err := r.restoreSnapshot(ctx, op)
	return refused, err
}

// checkRestoreNodes asks the node at each target's address, all at once,
// for its system UUID (intake.CheckIdentity), before the first step takes
// a control plane out of etcd: a node that is another machine refuses the
// restore, nothing sent to any node (each step checks its own node again,
// for a node that changed since). A control plane whose node does not
// answer makes the restore wait (a waitError): each takes part, and its
// step would fail once the others had left etcd. A worker's does not: its
// only step, the kubelet's restart at the end, checks it then.
func (r *Reconciler) checkRestoreNodes(ctx context.Context, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		return "", fmt.Errorf("load the secrets bundle of TalosCluster %s: %w", cluster.Name, err)
	}
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), r.Now(), r.Options.CredentialTTL)
	if err != nil {
		return "", err
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, m := range targets {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
			defer cancel()
			node, err := r.Dialer.Configured(cctx, m.Spec.Address, creds)
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = node.Close() }()
			errs[i] = intake.CheckIdentity(cctx, node, m)
		})
	}
	wg.Wait()
	var silent []string
	for i, m := range targets {
		var notThis *intake.NotThisMachineError
		switch {
		case errors.As(errs[i], &notThis):
			return fmt.Sprintf("TalosMachine %s: %v", m.Name, errs[i]), nil
		case errs[i] != nil && render.MachineRole(m) == v1alpha1.MachineRoleControlPlane:
			silent = append(silent, fmt.Sprintf("%s (%v)", m.Name, errs[i]))
		}
	}
	if len(silent) > 0 {
		return "", &waitError{reason: v1alpha1.OperationReasonClusterNotHealthy,
			msg: fmt.Sprintf("waiting for the nodes of control planes %s to answer: each takes part in the restore, which starts once every one is known to be its machine", strings.Join(silent, ", "))}
	}
	return "", nil
}

// restoreSource is a verified snapshot in the scratch directory.
type restoreSource struct {
	path   string
	backup *v1alpha1.TalosBackup
	file   v1alpha1.BackupFile
	info   snapshot.Info
}

// restoreSnapshot returns the operation's verified snapshot, fetching,
// decrypting and checking it first when the scratch directory does not
// hold it. refused says why the backup cannot be restored.
func (r *Reconciler) restoreSnapshot(ctx context.Context, op *v1alpha1.TalosOperation) (_ *restoreSource, refused string, _ error) {
	params := op.Spec.EtcdRestore
	var b v1alpha1.TalosBackup
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: params.Backup}, &b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("spec.etcdRestore.backup: TalosBackup %s does not exist in namespace %s", params.Backup, op.Namespace), nil
		}
		return nil, "", fmt.Errorf("read TalosBackup %s: %w", params.Backup, err)
	}
	switch {
	case b.Spec.ClusterName != op.Spec.ClusterName:
		return nil, fmt.Sprintf("spec.etcdRestore.backup: TalosBackup %s is a backup of TalosCluster %s, not of %s", b.Name, b.Spec.ClusterName, op.Spec.ClusterName), nil
	case b.Status.Phase != v1alpha1.BackupSucceeded || b.Status.Target == nil:
		return nil, fmt.Sprintf("spec.etcdRestore.backup: TalosBackup %s did not succeed (phase %q); restore a backup that did", b.Name, b.Status.Phase), nil
	}
	i := slices.IndexFunc(b.Status.Files, func(f v1alpha1.BackupFile) bool { return f.Content == v1alpha1.BackupContentEtcdSnapshot })
	if i < 0 {
		return nil, fmt.Sprintf("spec.etcdRestore.backup: TalosBackup %s holds no etcd snapshot", b.Name), nil
	}
	src := &restoreSource{path: r.restorePath(op), backup: &b, file: b.Status.Files[i]}
	if _, err := os.Stat(src.path); errors.Is(err, os.ErrNotExist) {
		if refused, err := r.fetchSnapshot(ctx, op, src); refused != "" || err != nil {
			return nil, refused, err
		}
	} else if err != nil {
		return nil, "", err
	}
	info, err := snapshot.Read(src.path, restoreMarkerKey)
	switch {
	case err != nil:
		refused = fmt.Sprintf("the etcd snapshot of TalosBackup %s cannot be restored: %v", b.Name, err)
	case info.KeyRevision == 0:
		refused = fmt.Sprintf("the etcd snapshot of TalosBackup %s holds no %s Namespace: it is not a Kubernetes cluster's etcd", b.Name, restoreMarkerNamespace)
	}
	if refused != "" {
		// Decrypted, and of no use: not kept a moment longer.
		if err := r.removeScratch(op); err != nil {
			return nil, "", err
		}
		return nil, refused, nil
	}
	src.info = info
	return src, "", nil
}

// fetchSnapshot reads the backup's snapshot from its target, decrypts it
// with the identity of spec.etcdRestore.identitySecret and checks its
// SHA-256 on the way, and keeps it at src.path only once all of it checked.
func (r *Reconciler) fetchSnapshot(ctx context.Context, op *v1alpha1.TalosOperation, src *restoreSource) (refused string, _ error) {
	identities, refused, err := r.restoreIdentities(ctx, op)
	if refused != "" || err != nil {
		return refused, err
	}
	b := src.backup
	target, _, err := store.OpenForCluster(ctx, r.Secrets, b.Namespace, b.Spec.ClusterName, b.Status.Target, r.Options.BackupVolumeDir, r.Options.CallTimeout)
	if err != nil {
		return fmt.Sprintf("the target of TalosBackup %s: %v", b.Name, err), nil
	}
	defer func() { _ = target.Close() }()
	rd, err := target.NewReader(ctx, b.Name+"/"+src.file.Name, nil)
	if err != nil {
		return fmt.Sprintf("read %s%s/%s: %v", target.Location, b.Name, src.file.Name, target.Redact(store.Explain(err))), nil
	}
	defer func() { _ = rd.Close() }()
	if err := os.MkdirAll(filepath.Dir(src.path), 0o700); err != nil {
		return "", err
	}
	partial := src.path + restorePartialFile
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("the controller's scratch directory: %w", err)
	}
	_, err = archive.Read(f, rd, identities, b.Status.Compression, src.file.Digest)
	err = errors.Join(err, f.Close())
	if err != nil {
		_ = os.Remove(partial)
		var noMatch *age.NoIdentityMatchError
		switch {
		case errors.As(err, &noMatch):
			return fmt.Sprintf("the identity in Secret %s matches none of the recipients TalosBackup %s was encrypted to (%s); name a Secret holding one of their identities",
				op.Spec.EtcdRestore.IdentitySecret, b.Name, strings.Join(b.Status.Recipients, ", ")), nil
		case errors.Is(err, archive.ErrChecksumMismatch):
			return fmt.Sprintf("the etcd snapshot of TalosBackup %s is corrupt: %v; nothing was touched", b.Name, err), nil
		}
		return fmt.Sprintf("the etcd snapshot of TalosBackup %s could not be read: %v; nothing was touched", b.Name, target.Redact(err)), nil
	}
	return "", os.Rename(partial, src.path)
}

// restoreIdentities parses the age identities of the restore's identity
// Secret. Its content never goes into a message.
func (r *Reconciler) restoreIdentities(ctx context.Context, op *v1alpha1.TalosOperation) ([]age.Identity, string, error) {
	name := op.Spec.EtcdRestore.IdentitySecret
	var s corev1.Secret
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("spec.etcdRestore.identitySecret: Secret %s does not exist in namespace %s", name, op.Namespace), nil
		}
		return nil, "", fmt.Errorf("read the identity Secret %s: %w", name, err)
	}
	data, ok := s.Data[v1alpha1.IdentitySecretKey]
	if !ok {
		return nil, fmt.Sprintf("spec.etcdRestore.identitySecret: Secret %s has no %q key", name, v1alpha1.IdentitySecretKey), nil
	}
	ids, err := age.ParseIdentities(strings.NewReader(string(data)))
	if err != nil {
		return nil, fmt.Sprintf("spec.etcdRestore.identitySecret: the %q key of Secret %s holds no age identity (AGE-SECRET-KEY-1...)", v1alpha1.IdentitySecretKey, name), nil
	}
	return ids, "", nil
}

// The files an etcd-restore keeps in the scratch directory: its verified
// snapshot, and while it is fetched, the part fetched so far.
const (
	restoreFilePrefix  = "etcd-restore-"
	restoreFileSuffix  = ".snapshot"
	restorePartialFile = ".partial"
)

// scratchDir is the controller's scratch directory.
func (r *Reconciler) scratchDir() string {
	if r.Options.ScratchDir != "" {
		return r.Options.ScratchDir
	}
	return os.TempDir()
}

// restorePath is where the operation's verified snapshot is kept.
func (r *Reconciler) restorePath(op *v1alpha1.TalosOperation) string {
	return filepath.Join(r.scratchDir(), restoreFilePrefix+string(op.UID)+restoreFileSuffix)
}

// removeScratch removes what an etcd-restore keeps in the scratch
// directory: its decrypted snapshot (the cluster's Secrets in plain
// text), whole or in part.
func (r *Reconciler) removeScratch(op *v1alpha1.TalosOperation) error {
	if op.Spec.Type != v1alpha1.OperationEtcdRestore {
		return nil
	}
	path := r.restorePath(op)
	for _, p := range []string{path, path + restorePartialFile} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the decrypted etcd snapshot %s: %w", p, err)
		}
	}
	return nil
}

// sweepScratch removes the etcd-restore snapshots in the scratch directory
// that no operation needs: those of operations that are gone or ended.
// Each operation removes its own as it ends or is deleted (it holds the
// finalizer from before it fetched); this catches what a controller
// stopped at the wrong moment, or an older one, left behind.
func (r *Reconciler) sweepScratch(ctx context.Context) error {
	entries, err := os.ReadDir(r.scratchDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the scratch directory: %w", err)
	}
	files := map[types.UID][]string{}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), restoreFilePrefix)
		if !ok || e.IsDir() {
			continue
		}
		if uid, ok := strings.CutSuffix(strings.TrimSuffix(rest, restorePartialFile), restoreFileSuffix); ok && uid != "" {
			files[types.UID(uid)] = append(files[types.UID(uid)], filepath.Join(r.scratchDir(), e.Name()))
		}
	}
	if len(files) == 0 {
		return nil
	}
	// Listed after the directory was read: an operation whose file was
	// there is in the list unless it is gone.
	var ops v1alpha1.TalosOperationList
	if err := r.APIReader.List(ctx, &ops); err != nil {
		return fmt.Errorf("list the TalosOperations: %w", err)
	}
	for _, op := range ops.Items {
		if op.Spec.Type == v1alpha1.OperationEtcdRestore && op.Status.Phase != v1alpha1.OperationSucceeded && op.Status.Phase != v1alpha1.OperationFailed {
			delete(files, op.UID)
		}
	}
	for _, paths := range files {
		for _, p := range paths {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove the decrypted etcd snapshot %s: %w", p, err)
			}
		}
	}
	return nil
}

// startRestore starts an etcd-restore step.
func startRestore(ctx context.Context, s *step) (ctrl.Result, error) {
	switch s.record().Action {
	case v1alpha1.ActionLeaveEtcd:
		return s.leaveEtcd(ctx, true)
	case v1alpha1.ActionWipeEtcd:
		return s.wipeEtcd(ctx)
	case v1alpha1.ActionRecoverEtcd:
		return s.recoverEtcd(ctx, true)
	case v1alpha1.ActionJoinEtcd:
		if err := s.begin(ctx, "", "waiting for the node to join the recovered etcd"); err != nil {
			return ctrl.Result{}, err
		}
		return s.joinEtcd(ctx)
	case v1alpha1.ActionRestartKubelet:
		return s.restartKubelet(ctx)
	}
	return s.failed(ctx, "an etcd-restore step without an action this controller knows (%q)", s.record().Action)
}

// followRestore follows an etcd-restore step in flight.
func followRestore(ctx context.Context, s *step) (ctrl.Result, error) {
	switch s.record().Action {
	case v1alpha1.ActionLeaveEtcd:
		return s.leaveEtcd(ctx, false)
	case v1alpha1.ActionWipeEtcd:
		back, res, err := s.backFromWipe(ctx)
		if !back || err != nil {
			return res, err
		}
		return s.done(ctx, "EPHEMERAL wiped: the node runs a new boot with an empty etcd")
	case v1alpha1.ActionRecoverEtcd:
		return s.recoverEtcd(ctx, false)
	case v1alpha1.ActionJoinEtcd:
		return s.joinEtcd(ctx)
	case v1alpha1.ActionRestartKubelet:
		return s.restartKubelet(ctx)
	}
	return s.failed(ctx, "an etcd-restore step without an action this controller knows (%q)", s.record().Action)
}

// takeForRestore takes the cluster's disruption budget for the step's node,
// without the health checks of other operations: a restore takes etcd
// away on purpose.
func (s *step) takeForRestore(ctx context.Context) (bool, ctrl.Result, error) {
	reason, msg, err := s.acquire(ctx, v1alpha1.DisruptionReset, 1)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if msg != "" {
		res, err := s.waitFor(reason, "%s", msg)
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

// isMember reports whether the node's own hostname is a member of the etcd
// cluster it reports.
func (s *step) isMember(ctx context.Context) (bool, error) {
	id, err := s.node.Identity(ctx)
	if err != nil {
		return false, err
	}
	members, err := s.node.EtcdMembers(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(members, func(m talos.EtcdMember) bool { return m.Hostname == id.Hostname }), nil
}

// leaveEtcd has the node leave etcd, unless it reports it is no member.
func (s *step) leaveEtcd(ctx context.Context, starting bool) (ctrl.Result, error) {
	if starting {
		if ok, res, err := s.takeForRestore(ctx); !ok {
			return res, err
		}
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if starting {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "leaving etcd"); err != nil {
			return ctrl.Result{}, err
		}
	}
	member, err := s.isMember(cctx)
	if err != nil {
		// A restore that failed after its wipes left no etcd anywhere: then
		// there is nothing to leave, and this restore finishes that one.
		answers, aerr := s.etcdAnswersAnywhere(ctx)
		if aerr != nil {
			return ctrl.Result{}, aerr
		}
		if !answers {
			return s.done(ctx, "no control plane's etcd answers: nothing to leave")
		}
		return s.failed(ctx, "read the node's etcd membership: %v", err)
	}
	if !member {
		return s.done(ctx, "not an etcd member: nothing to leave")
	}
	if err := s.node.EtcdLeave(cctx); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return s.done(ctx, "left etcd; its etcd stays stopped until the node reboots")
}

// etcdAnswersAnywhere reports whether the etcd of any of the cluster's
// control planes answers, each asked over its own session.
func (s *step) etcdAnswersAnywhere(ctx context.Context) (bool, error) {
	machines := s.machines
	if machines == nil {
		var err error
		if machines, err = s.r.machines(ctx, s.x.op); err != nil {
			return false, err
		}
	}
	for _, m := range machines {
		if render.MachineRole(m) != v1alpha1.MachineRoleControlPlane || m.Status.AppliedConfig == nil {
			continue
		}
		node := s.node
		if m.UID != s.m.UID {
			var err error
			if node, err = s.r.Dialer.Configured(ctx, m.Spec.Address, s.creds); err != nil {
				return false, err
			}
		}
		cctx, cancel := s.call(ctx)
		_, err := node.EtcdStatus(cctx)
		cancel()
		if node != s.node {
			_ = node.Close()
		}
		if err == nil {
			return true, nil
		}
	}
	return false, nil
}

// wipeEtcd wipes the node's EPHEMERAL partition and reboots it, recording
// its boot ID first.
func (s *step) wipeEtcd(ctx context.Context) (ctrl.Result, error) {
	if ok, res, err := s.takeForRestore(ctx); !ok {
		return res, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
		return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
	}
	bootID, err := s.node.BootID(cctx)
	if err != nil {
		return s.failed(ctx, "read the boot ID before wiping: %v", err)
	}
	if err := s.begin(ctx, bootID, "wiping EPHEMERAL (etcd's data) and rebooting"); err != nil {
		return ctrl.Result{}, err
	}
	if err := s.node.WipeEtcdData(cctx); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// backFromWipe reports whether the node is back from its wipe: another
// boot ID, in stage running. It is not ready (its etcd waits for the
// recovery), so backFromReboot's readiness is not asked for.
func (s *step) backFromWipe(ctx context.Context) (bool, ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	rec := s.record()
	id, err := s.node.BootID(cctx)
	var st *talos.Status
	if err == nil {
		st, err = s.node.Status(cctx)
	}
	switch {
	case err != nil && s.timedOut():
		res, err2 := s.failed(ctx, "the node did not come back within %s of its wipe: %v", s.r.Options.StepTimeout, err)
		return false, res, err2
	case err != nil:
		res, err2 := s.wait("waiting for the node to come back from its wipe")
		return false, res, err2
	case id == rec.BootID && st.Stage == "running":
		// The controller stopped between recording the step and calling.
		if err := s.node.WipeEtcdData(cctx); err != nil {
			res, err2 := s.failed(ctx, "%v", err)
			return false, res, err2
		}
	case id != rec.BootID && st.Stage == "running":
		return true, ctrl.Result{}, nil
	}
	if s.timedOut() {
		res, err2 := s.failed(ctx, "the node did not come back running within %s of its wipe (stage %s)", s.r.Options.StepTimeout, st.Stage)
		return false, res, err2
	}
	res, err2 := s.wait("waiting for the node to come back from its wipe (stage %s)", st.Stage)
	return false, res, err2
}

// recoverEtcd uploads the verified snapshot and bootstraps etcd from it,
// unless the node's etcd already runs (the controller stopped after the
// bootstrap), then waits for kube-apiserver to serve the snapshot's data.
func (s *step) recoverEtcd(ctx context.Context, starting bool) (ctrl.Result, error) {
	src, refused, err := s.r.restoreSnapshot(ctx, s.x.op)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused != "" {
		return s.failed(ctx, "%s", refused)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if starting {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "recovering etcd from TalosBackup %s (revision %d, %s)", src.backup.Name, src.info.Revision, src.file.Digest); err != nil {
			return ctrl.Result{}, err
		}
	}
	if _, err := s.node.EtcdStatus(cctx); err != nil {
		// The node's etcd does not run: it waits for the recovery.
		if err := s.uploadAndBootstrap(ctx, src); err != nil {
			return s.failed(ctx, "%v", err)
		}
		return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
	}
	served, err := s.servesSnapshot(ctx, src.info)
	if served == "" && err == nil {
		return s.done(ctx, "etcd recovered from TalosBackup %s: kube-apiserver serves its data, at revision %d and later", src.backup.Name, src.info.Revision)
	}
	if s.timedOut() {
		return s.failed(ctx, "kube-apiserver did not serve the snapshot's data within %s of the recovery: %s", s.r.Options.StepTimeout, cmpOr(served, err))
	}
	return s.wait("waiting for kube-apiserver to serve the recovered data: %s", cmpOr(served, err))
}

// uploadAndBootstrap sends the snapshot (bounded by InstallTimeout, as it
// may be gigabytes) and bootstraps etcd from it.
func (s *step) uploadAndBootstrap(ctx context.Context, src *restoreSource) error {
	f, err := os.Open(src.path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	uctx, cancel := context.WithTimeout(ctx, s.r.Options.InstallTimeout)
	defer cancel()
	if err := s.node.EtcdRecover(uctx, io.Reader(f)); err != nil {
		return err
	}
	err = s.node.BootstrapRecover(uctx)
	if errors.Is(err, talos.ErrAlreadyBootstrapped) {
		return nil
	}
	return err
}

// servesSnapshot says how the cluster's kube-apiserver differs from the
// snapshot, or "": kube-system's resourceVersion is the snapshot's last
// write of it, and the store's revision is the snapshot's or later.
func (s *step) servesSnapshot(ctx context.Context, info snapshot.Info) (string, error) {
	cs, err := s.kube()
	if err != nil {
		return "", err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	var ns *corev1.Namespace
	if err := s.withAccess(cctx, func() (err error) {
		ns, err = cs.CoreV1().Namespaces().Get(cctx, restoreMarkerNamespace, metav1.GetOptions{})
		return err
	}); err != nil {
		return "", err
	}
	if want := strconv.FormatInt(info.KeyRevision, 10); ns.ResourceVersion != want {
		return fmt.Sprintf("Namespace %s is at resourceVersion %s, the snapshot's at %s", restoreMarkerNamespace, ns.ResourceVersion, want), nil
	}
	// A list answers at the store's current revision; it names kube-system,
	// the one Namespace the controller may read.
	list, err := cs.CoreV1().Namespaces().List(cctx, metav1.ListOptions{FieldSelector: "metadata.name=" + restoreMarkerNamespace})
	if err != nil {
		return "", err
	}
	rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	if err != nil {
		return "", fmt.Errorf("kube-apiserver lists at resourceVersion %q: %w", list.ResourceVersion, err)
	}
	if rv < info.Revision {
		return fmt.Sprintf("etcd is at revision %d, before the snapshot's %d", rv, info.Revision), nil
	}
	return "", nil
}

// joinEtcd waits for the node to report itself a member of the recovered
// etcd.
func (s *step) joinEtcd(ctx context.Context) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	member, err := s.isMember(cctx)
	if err == nil && member {
		return s.done(ctx, "joined the recovered etcd")
	}
	if s.timedOut() {
		return s.failed(ctx, "the node did not join the recovered etcd within %s: %s", s.r.Options.StepTimeout, cmpOr("", err))
	}
	return s.wait("waiting for the node to join the recovered etcd")
}

// restartKubelet restarts the node's kubelet; a restart again after the
// controller stopped in between is harmless.
func (s *step) restartKubelet(ctx context.Context) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if s.record().Phase == v1alpha1.OperationPending {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "restarting the kubelet"); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := s.node.RestartService(cctx, "kubelet"); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return s.done(ctx, "kubelet restarted")
}

// cmpOr is msg, or err's message when msg is empty.
func cmpOr(msg string, err error) string {
	if msg == "" && err != nil {
		return err.Error()
	}
	return msg
}
