package reclaim

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// resetManaged deletes the old TalosMachine, whose finalizer resets its node,
// and waits until it is gone.
func (s *state) resetManaged(ctx context.Context) (ctrl.Result, error) {
	rc, ref := s.rc, s.rc.Spec.MachineRef
	var old v1alpha1.TalosMachine
	err := s.r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &old)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && old.UID != rc.Status.SourceUID):
		// Gone (a machine by that name with another UID is a new one): its
		// finalizer let it go once its node answered in maintenance mode.
		events.Record(s.r.Recorder, rc, nil, v1alpha1.EventNodeReset, eventActionReset,
			"TalosMachine %s/%s is gone and its node at %s is in maintenance mode", ref.Namespace, ref.Name, rc.Status.Address)
		rc.Status.Phase = v1alpha1.ReclaimJoining
		s.progress(v1alpha1.ReclaimReasonJoining, "the node at %s is in maintenance mode; it joins as TalosMachine %s", rc.Status.Address, rc.Status.MachineName)
		return ctrl.Result{Requeue: true}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if old.DeletionTimestamp.IsZero() {
		uid := rc.Status.SourceUID
		err := s.r.Client.Delete(ctx, &old, client.Preconditions{UID: &uid})
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Replaced or gone meanwhile: the next pass sees which.
			return ctrl.Result{Requeue: true}, nil
		case apierrors.IsForbidden(err):
			s.progress(v1alpha1.ReclaimReasonDeleteRefused, "deleting TalosMachine %s/%s is refused, so its node is not reset: %s",
				ref.Namespace, ref.Name, apiMessage(err))
			if c := meta.FindStatusCondition(s.before.Conditions, v1alpha1.ReclaimConditionProgressing); c == nil || c.Reason != v1alpha1.ReclaimReasonDeleteRefused {
				events.Record(s.r.Recorder, rc, nil, v1alpha1.ReclaimReasonDeleteRefused, eventActionReset, "%s", apiMessage(err))
			}
			return ctrl.Result{RequeueAfter: s.r.Options.RetryInterval}, nil
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("delete TalosMachine %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		events.Record(s.r.Recorder, rc, nil, v1alpha1.EventReclaimResetting, eventActionReset,
			"Deleted TalosMachine %s/%s: its node at %s is reset to maintenance mode (gracefully, under its cluster's disruption budget)",
			ref.Namespace, ref.Name, rc.Status.Address)
	}
	if rc.Status.ResetAt == nil {
		rc.Status.ResetAt = &s.now
	}
	msg := "its node is being reset"
	if c := meta.FindStatusCondition(old.Status.Conditions, v1alpha1.MachineConditionReady); c != nil && c.Message != "" {
		msg = c.Message
	}
	s.progress(v1alpha1.ReclaimReasonResetting, "waiting for TalosMachine %s/%s to go: %s", ref.Namespace, ref.Name, msg)
	return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
}

// resetUnmanaged resets the node with the handed-over talosconfig, deletes
// the Secret, and waits for the node to answer in maintenance mode.
func (s *state) resetUnmanaged(ctx context.Context) (ctrl.Result, error) {
	rc := s.rc
	if rc.Status.ResetAt == nil {
		if ours, _ := s.r.maintenance(ctx, rc); ours {
			// Reset already (the answer was lost with a restart).
			rc.Status.ResetAt = &s.now
		} else {
			err := s.r.resetNode(ctx, rc)
			var notThis *notThisNodeError
			switch {
			case errors.Is(err, errBadTalosconfig):
				return s.fail(v1alpha1.ReclaimReasonBadTalosconfig, "%v; nothing was reset", err)
			case errors.As(err, &notThis):
				return s.fail(v1alpha1.ReclaimReasonNotThisMachine, "%v; nothing was reset", err)
			case errors.Is(err, errReadingSecret):
				return ctrl.Result{}, err
			case talos.NotAnswering(err) && s.now.Sub(rc.Status.StartedAt.Time) <= s.r.Options.ResetTimeout:
				// It answered before the reset: it is resetting already, asked
				// by a pass whose record a restart lost, or it will answer again.
				s.progress(v1alpha1.ReclaimReasonResetting, "the node at %s does not answer; waiting for it to answer in maintenance mode, or again to be reset", rc.Status.Address)
				return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
			case err != nil:
				return s.fail(v1alpha1.ReclaimReasonResetFailed, "the node at %s did not accept the reset: %v", rc.Status.Address, err)
			}
			rc.Status.ResetAt = &s.now
			events.Record(s.r.Recorder, rc, nil, v1alpha1.EventReclaimResetting, eventActionReset,
				"The node at %s accepted the reset (wipe %s, graceful %t)", rc.Status.Address, rc.Spec.Wipe, graceful(rc))
		}
		// The reset call ended: the talosconfig has done its one job. The
		// status is written first, so a restart never calls Reset twice
		// with a Secret already gone.
		if err := s.write(ctx); err != nil {
			return ctrl.Result{}, err
		}
		s.before = rc.Status.DeepCopy()
		if err := s.r.deleteTalosconfig(ctx, rc); err != nil {
			return ctrl.Result{}, err
		}
	}
	ours, other := s.r.maintenance(ctx, rc)
	if ours {
		events.Record(s.r.Recorder, rc, nil, v1alpha1.EventNodeReset, eventActionReset,
			"The node at %s is in maintenance mode", rc.Status.Address)
		rc.Status.Phase = v1alpha1.ReclaimJoining
		s.progress(v1alpha1.ReclaimReasonJoining, "the node at %s is in maintenance mode; it joins as TalosMachine %s", rc.Status.Address, rc.Status.MachineName)
		return ctrl.Result{Requeue: true}, nil
	}
	if s.now.Sub(rc.Status.ResetAt.Time) > s.r.Options.ResetTimeout {
		if other != "" {
			return s.fail(v1alpha1.ReclaimReasonNotThisMachine, "%s; the node reset did not answer in its place within %s, and nothing was sent to the other",
				other, s.r.Options.ResetTimeout)
		}
		return s.fail(v1alpha1.ReclaimReasonResetFailed, "the node at %s did not come back in maintenance mode within %s of its reset",
			rc.Status.Address, s.r.Options.ResetTimeout)
	}
	if other != "" {
		s.progressOnce(v1alpha1.ReclaimReasonNotThisMachine, "%s; nothing is sent to it, and the reclaim waits for the node reset", other)
		return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
	}
	s.progress(v1alpha1.ReclaimReasonResetting, "the node at %s accepted the reset; waiting for it to answer in maintenance mode", rc.Status.Address)
	return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
}

func graceful(rc *v1alpha1.MachineReclaim) bool {
	return rc.Spec.Graceful == nil || *rc.Spec.Graceful
}
