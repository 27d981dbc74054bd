package reclaim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
)

// join creates the new TalosMachine, approves it once its maintenance
// certificate is pinned, and ends when it is Ready.
func (s *state) join(ctx context.Context) (ctrl.Result, error) {
	rc := s.rc
	var m v1alpha1.TalosMachine
	err := s.r.Client.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: rc.Status.MachineName}, &m)
	if apierrors.IsNotFound(err) {
		m = *s.newMachine()
		if err := s.r.Client.Create(ctx, &m); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return ctrl.Result{Requeue: true}, nil
			}
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return s.fail(v1alpha1.ReclaimReasonCannotAdd, "the node at %s is in maintenance mode, but TalosMachine %s is refused: %v",
					rc.Status.Address, rc.Status.MachineName, apiMessage(err))
			}
			return ctrl.Result{}, fmt.Errorf("create TalosMachine %s/%s: %w", rc.Namespace, rc.Status.MachineName, err)
		}
		s.progress(v1alpha1.ReclaimReasonJoining, "created TalosMachine %s; waiting for its maintenance certificate to be pinned", m.Name)
		return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	// Only the machine this reclaim made, at the node's address, is approved
	// on its behalf.
	if m.Labels[v1alpha1.LabelMachineReclaim] != rc.Name || !equality.Semantic.DeepEqual(m.Spec, s.newMachine().Spec) ||
		!m.DeletionTimestamp.IsZero() {
		return s.fail(v1alpha1.ReclaimReasonCannotAdd, "TalosMachine %s is not the one this reclaim creates for the node at %s (someone else made or deleted it)",
			m.Name, rc.Status.Address)
	}
	known, mismatch := s.identify(&m)
	if mismatch != "" {
		return s.rejectOther(ctx, &m, mismatch)
	}
	return s.follow(ctx, &m, known)
}

// rejectOther ends the reclaim whose new machine m is not the node reset
// (mismatch says how): it is never approved on the reclaim's behalf, and
// rejected so that no one approves it for the node reclaimed.
func (s *state) rejectOther(ctx context.Context, m *v1alpha1.TalosMachine, mismatch string) (ctrl.Result, error) {
	rc := s.rc
	if m.Status.Approval == nil {
		if err := s.r.decide(ctx, m, v1alpha1.ApprovalRejected, fmt.Sprintf("not the node MachineReclaim %s reset: %s", rc.Name, mismatch)); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{Requeue: true}, nil
			}
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				return ctrl.Result{}, err
			}
			return s.fail(v1alpha1.ReclaimReasonNotThisMachine, "%s; rejecting TalosMachine %s is refused (%s): do not approve it", mismatch, m.Name, apiMessage(err))
		}
	}
	if a := m.Status.Approval; a.Decision == v1alpha1.ApprovalApproved {
		return s.fail(v1alpha1.ReclaimReasonNotThisMachine, "%s; %s approved TalosMachine %s all the same", mismatch, a.By, m.Name)
	}
	return s.fail(v1alpha1.ReclaimReasonNotThisMachine, "%s; TalosMachine %s is rejected, so nothing is sent to it", mismatch, m.Name)
}

// follow approves m, the node reset (known says whether it proved so),
// on the reclaim's behalf when no person needs to, and follows it to
// Ready, which ends the reclaim.
func (s *state) follow(ctx context.Context, m *v1alpha1.TalosMachine, known bool) (ctrl.Result, error) {
	rc := s.rc
	switch a := m.Status.Approval; {
	case a != nil && a.Decision == v1alpha1.ApprovalRejected:
		return s.fail(v1alpha1.ReclaimReasonRejected, "%s rejected TalosMachine %s: %s", a.By, m.Name, a.Reason)
	case a == nil && known && m.Status.Phase == v1alpha1.MachinePhasePendingApproval:
		if why := s.needsAPerson(); why != "" {
			s.progressOnce(v1alpha1.ReclaimReasonWaitingForApproval,
				"the node at %s is the one reset (%s), but %s: TalosMachine %s waits for an admin's approval (ichor -n %s approve %s)",
				rc.Status.Address, s.proof(m), why, m.Name, m.Namespace, m.Name)
			return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
		}
		reason := fmt.Sprintf("reclaimed by MachineReclaim %s, started by %s: the node reset (%s)", rc.Name, rc.Status.ReclaimedBy, s.proof(m))
		if err := s.r.decide(ctx, m, v1alpha1.ApprovalApproved, reason); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{Requeue: true}, nil
			}
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return s.fail(v1alpha1.ReclaimReasonCannotAdd, "approving TalosMachine %s is refused: %v", m.Name, apiMessage(err))
			}
			return ctrl.Result{}, err
		}
		events.Record(s.r.Recorder, rc, nil, v1alpha1.EventReclaimApproved, "Approve",
			"Approved TalosMachine %s into TalosCluster %s, as %s's reclaim: the node at %s is the one reset (%s)",
			m.Name, rc.Spec.ClusterName, rc.Status.ReclaimedBy, m.Spec.Address, s.proof(m))
	case a == nil && meta.IsStatusConditionFalse(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified) &&
		rc.Spec.ExpectedFingerprint != "":
		// Intake pins only the expected certificate; another answers.
		s.progressOnce(v1alpha1.ReclaimReasonNotThisMachine,
			"the node at %s does not present spec.expectedFingerprint %s; nothing is sent to it, and TalosMachine %s waits for the node reset",
			rc.Status.Address, rc.Spec.ExpectedFingerprint, m.Name)
		return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
	case a != nil && m.Status.Phase != v1alpha1.MachinePhaseReady:
		if c := meta.FindStatusCondition(s.before.Conditions, v1alpha1.ReclaimConditionProgressing); c != nil && c.Reason == v1alpha1.ReclaimReasonWaitingForApproval {
			events.Record(s.r.Recorder, rc, nil, v1alpha1.EventReclaimApproved, "Approve", "%s approved TalosMachine %s", a.By, m.Name)
		}
	case m.Status.Phase == v1alpha1.MachinePhaseReady:
		rc.Status.Phase = v1alpha1.ReclaimSucceeded
		rc.Status.CompletedAt = &s.now
		msg := fmt.Sprintf("the node at %s is Ready in TalosCluster %s as TalosMachine %s", rc.Status.Address, rc.Spec.ClusterName, m.Name)
		s.set(v1alpha1.ReclaimConditionProgressing, metav1.ConditionFalse, v1alpha1.ReclaimReasonJoined, msg)
		s.set(v1alpha1.ReclaimConditionSucceeded, metav1.ConditionTrue, v1alpha1.ReclaimReasonJoined, msg)
		events.Record(s.r.Recorder, rc, nil, v1alpha1.EventReclaimed, "Reclaim", "%s", msg)
		return ctrl.Result{}, nil
	}
	msg := string(m.Status.Phase)
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionReady); c != nil && c.Message != "" {
		msg += ": " + c.Message
	}
	s.progress(v1alpha1.ReclaimReasonJoining, "TalosMachine %s joins TalosCluster %s: %s", m.Name, rc.Spec.ClusterName, msg)
	return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
}
