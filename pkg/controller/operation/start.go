package operation

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
)

// begin starts a started, Pending operation once it may run: its cluster
// exists and is not paused, it names machines of the cluster that it can
// act on, no other operation runs on the cluster, and the cluster is
// healthy (or an admin let it go past the ClusterHealth check).
func (r *Reconciler) begin(ctx context.Context, x *run) (ctrl.Result, error) {
	op := x.op
	wait := ctrl.Result{RequeueAfter: r.Options.PollInterval}
	kind, ok := kinds[op.Spec.Type]
	if !ok {
		// Stored before its type was retired, or by a newer Ichor.
		why := fmt.Sprintf("Ichor does not run %s operations", op.Spec.Type)
		if instead, retired := ichor.RetiredOperationTypes[ichor.OperationType(op.Spec.Type)]; retired {
			why = instead
		}
		r.fail(x, v1alpha1.OperationReasonNotSupported, "%s; delete this operation", why)
		return ctrl.Result{}, nil
	}
	cluster, err := r.cluster(ctx, op)
	if apierrors.IsNotFound(err) {
		r.waiting(x, v1alpha1.OperationReasonClusterNotFound, "TalosCluster %s does not exist in namespace %s", op.Spec.ClusterName, op.Namespace)
		return wait, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if cluster.Spec.Paused {
		r.waiting(x, v1alpha1.OperationReasonClusterPaused, "TalosCluster %s is paused; the operation starts when it is resumed", cluster.Name)
		return wait, nil
	}
	machines, err := r.machines(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}
	targets, err := targetsOf(op, machines)
	if err != nil {
		r.fail(x, v1alpha1.OperationReasonInvalidTarget, "%v", err)
		return ctrl.Result{}, nil
	}
	if kind.check != nil {
		if kind.fetches {
			if err := r.addFinalizer(ctx, op); err != nil {
				return ctrl.Result{}, err
			}
		}
		refused, err := kind.check(r, ctx, op, cluster, targets)
		if w, ok := asWait(err); ok {
			r.waiting(x, w.reason, "%s", w.msg)
			return wait, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if refused != "" {
			r.fail(x, v1alpha1.OperationReasonPrecheckFailed, "%s", refused)
			return ctrl.Result{}, nil
		}
	}
	if other, err := r.runningOn(ctx, op); err != nil {
		return ctrl.Result{}, err
	} else if other != "" {
		r.waiting(x, v1alpha1.OperationReasonWaitingForOperation,
			"TalosOperation %s runs on TalosCluster %s; one operation runs on a cluster at a time", other, cluster.Name)
		return wait, nil
	}
	if unhealthy := clusterUnhealthy(cluster, machines); unhealthy != "" {
		granted := cluster.Status.Override
		if granted == nil || granted.Check != v1alpha1.CheckClusterHealth {
			r.waiting(x, v1alpha1.OperationReasonClusterNotHealthy,
				"%s; the operation starts when the cluster is healthy, or an admin lets it go past the %s check (talosclusters/override)",
				unhealthy, v1alpha1.CheckClusterHealth)
			return wait, nil
		}
		if err := useOverride(ctx, r.Client, cluster, granted); err != nil {
			return ctrl.Result{}, err
		}
		x.set(v1alpha1.OperationConditionHealthOverridden, metav1.ConditionTrue, v1alpha1.OperationReasonOverridden,
			"started while %s, past the %s check, as %s allowed: %s", unhealthy, granted.Check, granted.By, granted.Reason)
		events.Record(r.Recorder, op, nil, v1alpha1.EventOverrideUsed, "Start",
			"Started while %s, past the %s check, as %s allowed: %s", unhealthy, granted.Check, granted.By, granted.Reason)
	}
	if err := r.addFinalizer(ctx, op); err != nil {
		return ctrl.Result{}, err
	}
	op.Status.Phase = v1alpha1.OperationRunning
	stepsOf := kind.steps
	if stepsOf == nil {
		stepsOf = oneStepEach
	}
	op.Status.Steps = stepsOf(op, targets)
	x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionTrue, v1alpha1.OperationReasonStepRunning,
		"%d steps to run", len(op.Status.Steps))
	events.Record(r.Recorder, op, nil, v1alpha1.EventOperationRunning, "Start",
		"Running %s on TalosCluster %s: %d steps (%s)", op.Spec.Type, cluster.Name, len(op.Status.Steps), stepNames(op))
	log.FromContext(ctx).Info("Operation running", "steps", len(op.Status.Steps))
	return ctrl.Result{Requeue: true}, nil
}

// runningOn names another operation that runs on op's cluster, if any.
func (r *Reconciler) runningOn(ctx context.Context, op *v1alpha1.TalosOperation) (string, error) {
	var list v1alpha1.TalosOperationList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(op.Namespace)); err != nil {
		return "", fmt.Errorf("list the operations of TalosCluster %s: %w", op.Spec.ClusterName, err)
	}
	for _, o := range list.Items {
		if o.UID != op.UID && o.Spec.ClusterName == op.Spec.ClusterName && o.Status.Phase == v1alpha1.OperationRunning {
			return o.Name, nil
		}
	}
	return "", nil
}

// clusterUnhealthy says why the cluster is not healthy enough for an
// operation to start, or "": every approved machine Ready, and etcd
// healthy (every control plane a voting member).
func clusterUnhealthy(c *v1alpha1.TalosCluster, machines []*v1alpha1.TalosMachine) string {
	var notReady []string
	for _, m := range machines {
		if m.Status.Phase != v1alpha1.MachinePhaseReady {
			notReady = append(notReady, fmt.Sprintf("%s (%s)", m.Name, phaseOf(m)))
		}
	}
	if len(notReady) > 0 {
		return fmt.Sprintf("machines not Ready: %v", notReady)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionEtcdHealthy); cond == nil || cond.Status != metav1.ConditionTrue {
		msg := "not reported yet"
		if cond != nil {
			msg = cond.Message
		}
		return "etcd is not healthy: " + msg
	}
	return ""
}
