package operation

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/workload"
)

// finalize lets go of what an ended operation holds: what it keeps in the
// scratch directory, with or without the finalizer (an etcd-restore
// refused by an older controller, which fetched its snapshot before it
// added the finalizer), and, while it holds the finalizer, the rest
// (cleanup); then the finalizer.
func (r *Reconciler) finalize(ctx context.Context, op *v1alpha1.TalosOperation) error {
	if err := r.removeScratch(op); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(op, Finalizer) {
		if err := r.cleanup(ctx, op); err != nil {
			return err
		}
	}
	return r.removeFinalizer(ctx, op)
}

// stop ends a deleted operation after its step in flight: a Running step
// is followed until its node is back (or the step fails); a step not yet
// started is not started. Then the budget is given back and the finalizer
// removed.
func (r *Reconciler) stop(ctx context.Context, x *run) (ctrl.Result, error) {
	op := x.op
	if !controllerutil.ContainsFinalizer(op, Finalizer) {
		return ctrl.Result{}, r.removeScratch(op)
	}
	if op.Status.Phase == v1alpha1.OperationRunning {
		var result ctrl.Result
		for i := range op.Status.Steps {
			if op.Status.Steps[i].Phase != v1alpha1.OperationRunning {
				continue
			}
			res, err := r.work(ctx, x, i, false)
			if err != nil {
				return res, err
			}
			if op.Status.Steps[i].Phase == v1alpha1.OperationRunning {
				result = soonest(result, res)
			}
		}
		if !result.IsZero() {
			return result, nil
		}
	}
	if err := r.cleanup(ctx, op); err != nil {
		return ctrl.Result{}, err
	}
	if op.Status.Phase == v1alpha1.OperationPending {
		events.Record(r.Recorder, op, nil, v1alpha1.EventOperationStopped, "Stop", "Deleted before it ran; nothing was touched")
	} else {
		events.Record(r.Recorder, op, nil, v1alpha1.EventOperationStopped, "Stop",
			"Deleted: stopped after the step in flight; %s", progressOf(op))
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, op)
}

// cleanup lets go of what an operation that ended or stopped may still
// hold: what it keeps in the scratch directory (removeScratch), its
// places in the cluster's disruption budget (a worker that took
// its place and was draining when another step failed), and the cordon of
// the Node of every step that did not succeed (a failed step's node, a
// draining one). A Node cordoned by anyone else stays as it is.
func (r *Reconciler) cleanup(ctx context.Context, op *v1alpha1.TalosOperation) error {
	r.prepulls.forget(op.UID)
	if err := r.removeScratch(op); err != nil {
		return err
	}
	cluster, err := r.cluster(ctx, op)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.budget.ReleaseOperation(ctx, client.ObjectKeyFromObject(cluster), op.Name); err != nil {
		return err
	}
	pending := map[string]bool{}
	for _, s := range op.Status.Steps {
		if s.Phase != v1alpha1.OperationSucceeded && s.Component == "" && s.Action == "" {
			pending[s.Machine] = true
		}
	}
	if len(pending) == 0 {
		return nil
	}
	machines, err := r.machines(ctx, op)
	if err != nil {
		return err
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		return fmt.Errorf("load the secrets bundle of TalosCluster %s: %w", cluster.Name, err)
	}
	s := &step{r: r, cluster: cluster, bundle: bundle, x: &run{op: op}}
	cs, err := s.kube()
	if err != nil {
		return err
	}
	for _, m := range machines {
		if !pending[m.Name] || m.Status.NodeName == "" {
			continue
		}
		if err := s.withAccess(ctx, func() error { return workload.Uncordon(ctx, cs, m.Status.NodeName, owner(op)) }); err != nil {
			return fmt.Errorf("uncordon Node %s after TalosOperation %s: %w", m.Status.NodeName, op.Name, err)
		}
	}
	return nil
}

// addFinalizer adds Finalizer through the finalizers subresource. The
// patch's answer replaces only the metadata of op: its status may hold
// what this reconcile has not written yet.
func (r *Reconciler) addFinalizer(ctx context.Context, op *v1alpha1.TalosOperation) error {
	if controllerutil.ContainsFinalizer(op, Finalizer) {
		return nil
	}
	patched := op.DeepCopy()
	controllerutil.AddFinalizer(patched, Finalizer)
	if err := r.Client.SubResource("finalizers").Patch(ctx, patched, client.MergeFromWithOptions(op, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer %s to TalosOperation %s/%s: %w", Finalizer, op.Namespace, op.Name, err)
	}
	op.Finalizers, op.ResourceVersion = patched.Finalizers, patched.ResourceVersion
	return nil
}

// removeFinalizer is addFinalizer's opposite.
func (r *Reconciler) removeFinalizer(ctx context.Context, op *v1alpha1.TalosOperation) error {
	if !controllerutil.ContainsFinalizer(op, Finalizer) {
		return nil
	}
	patched := op.DeepCopy()
	controllerutil.RemoveFinalizer(patched, Finalizer)
	err := r.Client.SubResource("finalizers").Patch(ctx, patched, client.MergeFromWithOptions(op, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s from TalosOperation %s/%s: %w", Finalizer, op.Namespace, op.Name, err)
	}
	op.Finalizers = patched.Finalizers
	if err == nil {
		op.ResourceVersion = patched.ResourceVersion
	}
	return nil
}
