package reclaim

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
)

// state is one pass over a reclaim: what it was, and what it becomes.
type state struct {
	r      *Reconciler
	rc     *v1alpha1.MachineReclaim
	before *v1alpha1.MachineReclaimStatus
	now    metav1.Time
	log    logr.Logger
}

// progress records what the reclaim does now.
func (s *state) progress(reason, format string, args ...any) {
	s.set(v1alpha1.ReclaimConditionProgressing, metav1.ConditionTrue, reason, fmt.Sprintf(format, args...))
}

// progressOnce records what the reclaim waits on, as an Event too when it
// comes to it (not on every pass).
func (s *state) progressOnce(reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c := meta.FindStatusCondition(s.before.Conditions, v1alpha1.ReclaimConditionProgressing); c == nil || c.Reason != reason {
		events.Record(s.r.Recorder, s.rc, nil, v1alpha1.EventReason(reason), "Reclaim", "%s", msg)
	}
	s.progress(reason, "%s", msg)
}

// fail ends the reclaim with why, as a Warning Event too.
func (s *state) fail(reason, format string, args ...any) (ctrl.Result, error) {
	msg := fmt.Sprintf(format, args...)
	s.rc.Status.Phase = v1alpha1.ReclaimFailed
	s.rc.Status.CompletedAt = &s.now
	s.set(v1alpha1.ReclaimConditionProgressing, metav1.ConditionFalse, reason, msg)
	s.set(v1alpha1.ReclaimConditionSucceeded, metav1.ConditionFalse, reason, msg)
	events.Record(s.r.Recorder, s.rc, nil, v1alpha1.EventReclaimFailed, "Reclaim", "%s", msg)
	s.log.Info("Reclaim failed", "reason", reason)
	return ctrl.Result{}, nil
}

func (s *state) set(condType string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.rc.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.rc.Generation, LastTransitionTime: s.now,
	})
}

// write saves the status when this pass changed it.
func (s *state) write(ctx context.Context) error {
	s.rc.Status.ObservedGeneration = s.rc.Generation
	if equality.Semantic.DeepEqual(s.before, &s.rc.Status) {
		return nil
	}
	if err := s.r.Client.Status().Update(ctx, s.rc); err != nil {
		return fmt.Errorf("update status of MachineReclaim %s/%s: %w", s.rc.Namespace, s.rc.Name, err)
	}
	return nil
}
