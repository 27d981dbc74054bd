package operation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/atomicfile"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/etcd/snapshot"
)

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
	// Written beside src.path and renamed over it once all of it checked;
	// a failed read leaves nothing behind (package atomicfile).
	var readErr error
	err = atomicfile.WriteFile(src.path, 0o600, func(w io.Writer) error {
		_, readErr = archive.Read(w, rd, identities, b.Status.Compression, src.file.Digest)
		return readErr
	})
	if err := readErr; err != nil {
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
	if err != nil {
		return "", fmt.Errorf("the controller's scratch directory: %w", err)
	}
	return "", nil
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
// snapshot, and while it is fetched, the part fetched so far: a hidden
// file named after the snapshot, a dot and a random suffix (package
// atomicfile), or, fetched by an older controller, the snapshot's name
// and restorePartialFile.
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
	paths := []string{path, path + restorePartialFile}
	entries, err := os.ReadDir(r.scratchDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read the scratch directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+filepath.Base(path)+".") {
			paths = append(paths, filepath.Join(r.scratchDir(), e.Name()))
		}
	}
	for _, p := range paths {
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
		rest, hidden := strings.CutPrefix(e.Name(), ".")
		rest, ok := strings.CutPrefix(rest, restoreFilePrefix)
		if !ok || e.IsDir() {
			continue
		}
		if i := strings.LastIndex(rest, restoreFileSuffix+"."); hidden && i >= 0 {
			rest = rest[:i+len(restoreFileSuffix)] // a fetch's part, atomicfile's
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
