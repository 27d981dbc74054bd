package operation

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/statusapply"
)

// waiting records why a started operation has not begun yet; an Event
// says so when the reason changes.
func (r *Reconciler) waiting(x *run, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c := findCondition(x.op, v1alpha1.OperationConditionProgressing); c == nil || c.Reason != reason {
		events.Record(r.Recorder, x.op, nil, v1alpha1.EventOperationWaiting, "Start", "Waiting: %s", msg)
	}
	x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionFalse, reason, "%s", msg)
}

// fail ends the operation as Failed, saying why.
func (r *Reconciler) fail(x *run, reason, format string, args ...any) {
	r.prepulls.forget(x.op.UID)
	msg := fmt.Sprintf(format, args...)
	op := x.op
	op.Status.Phase = v1alpha1.OperationFailed
	op.Status.CompletedAt = &x.now
	x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionFalse, v1alpha1.OperationReasonCompleted, "the operation failed")
	x.set(v1alpha1.OperationConditionSucceeded, metav1.ConditionFalse, reason, "%s", msg)
	events.Record(r.Recorder, op, nil, v1alpha1.EventOperationFailed, "Run", "Failed: %s; %s", msg, progressOf(op))
}

// succeed ends the operation as Succeeded.
func (r *Reconciler) succeed(x *run) {
	r.prepulls.forget(x.op.UID)
	op := x.op
	op.Status.Phase = v1alpha1.OperationSucceeded
	op.Status.CompletedAt = &x.now
	x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionFalse, v1alpha1.OperationReasonCompleted, "every step ran")
	x.set(v1alpha1.OperationConditionSucceeded, metav1.ConditionTrue, v1alpha1.OperationReasonAllStepsSucceeded,
		"%d of %d steps succeeded", len(op.Status.Steps), len(op.Status.Steps))
	events.Record(r.Recorder, op, nil, v1alpha1.EventOperationSucceeded, "Run",
		"Succeeded: %d steps on TalosCluster %s", len(op.Status.Steps), op.Spec.ClusterName)
}

func findCondition(op *v1alpha1.TalosOperation, condType string) *metav1.Condition {
	for i := range op.Status.Conditions {
		if op.Status.Conditions[i].Type == condType {
			return &op.Status.Conditions[i]
		}
	}
	return nil
}

// progressOf says how far the operation got, for people.
func progressOf(op *v1alpha1.TalosOperation) string {
	done := 0
	for _, s := range op.Status.Steps {
		if s.Phase == v1alpha1.OperationSucceeded {
			done++
		}
	}
	return fmt.Sprintf("%d of %d steps succeeded", done, len(op.Status.Steps))
}

func stepNames(op *v1alpha1.TalosOperation) string {
	names := make([]string, len(op.Status.Steps))
	for i, s := range op.Status.Steps {
		names[i] = s.Name()
	}
	return strings.Join(names, ", ")
}

// useOverride clears the cluster's override the operation used, only if
// it is still that grant.
func useOverride(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, used *v1alpha1.OverrideStatus) error {
	removed, err := statusapply.RemoveIfUnchanged(ctx, c, cluster, "/status/override", used)
	if err != nil {
		return fmt.Errorf("use the override of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	if !removed {
		return fmt.Errorf("the override of TalosCluster %s changed while it was being used; looking again", cluster.Name)
	}
	return nil
}
