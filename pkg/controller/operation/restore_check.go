package operation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/meta"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
)

// checkRestore refuses an etcd-restore before anything moves: a backup
// that is not a succeeded backup of this cluster with an etcd snapshot, an
// identity Secret that is missing or holds no age identity of the backup's
// recipients, a snapshot whose SHA-256 differs from the recorded one,
// control planes whose config is not final, and a node at a target's
// address that is not that machine (checkRestoreNodes).
func (r *Reconciler) checkRestore(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	if len(restoreSteps(op, targets)) == 0 {
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
