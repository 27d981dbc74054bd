package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// outcome is what run did: the files written and where, or why it failed
// and whether files it wrote are left on the target.
type outcome struct {
	files     []v1alpha1.BackupFile
	location  string
	reason    string
	leftovers bool
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
