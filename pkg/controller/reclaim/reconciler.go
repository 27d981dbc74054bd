// Package reclaim runs MachineReclaims: once an admin (or a holder of
// ichor-machine-reclaimer) posted the reclaim subresource, it resets the node
// to maintenance mode and brings it into the reclaim's cluster through a new
// TalosMachine. It approves a worker on the reclaim's behalf once the node
// that answers after the reset proves to be the one reset: it reports the
// system UUID read before the reset, and presents spec.expectedFingerprint
// when that is set. A control plane, which receives every CA key of its
// cluster, waits for an admin's approval; a node that is another machine is
// rejected and the reclaim fails.
//
// A managed machine is reset by deleting its TalosMachine, so the reset is
// the one every deletion gets (its finalizer: graceful, the old cluster's
// disruption budget held, etcd's quorum checked, the ControlPlaneQuorum
// admission check and its override), and the new TalosMachine is created only
// once the old one is gone, that is once its node answers in maintenance mode.
// An unmanaged node is reset with the talosconfig its owner handed over in a
// Secret of type ichor.dev/talosconfig, which is deleted when the reset call
// ends, whether it succeeded or not.
//
// Every step is decided from what the API server and the node say now, and
// recorded before the next one starts, so a controller restarted anywhere
// resumes without repeating or skipping one.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "machinereclaim"

// eventActionReset is the action of a reset's Events; their reasons, and
// the condition reasons DeleteRefused, NotThisMachine and
// WaitingForApproval that are Events too when the reclaim comes to them,
// are v1alpha1's (events.go).
const eventActionReset = "ResetNode"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval paces a reclaim that waits on a node or a machine. Default 2s.
	PollInterval time.Duration
	// RetryInterval paces a reclaim whose old machine's deletion is
	// refused. Default 30s.
	RetryInterval time.Duration
	// CallTimeout bounds one call to a node. Default 30s.
	CallTimeout time.Duration
	// ResetTimeout is how long an unmanaged node may take to come back in
	// maintenance mode after its reset. Default 15m.
	ResetTimeout time.Duration
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.PollInterval, 2*time.Second)
	defaults.Positive(&o.RetryInterval, 30*time.Second)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.ResetTimeout, 15*time.Minute)
	return o
}

// Reconciler runs MachineReclaims.
type Reconciler struct {
	Client client.Client
	// Secrets reads talosconfig Secrets uncached, one by one.
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler. It wakes on a reclaim's change
// and on a change of the TalosMachine it created.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.MachineReclaim{}).
		Watches(&v1alpha1.TalosMachine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name, ok := o.GetLabels()[v1alpha1.LabelMachineReclaim]
			if !ok {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		Complete(r)
}

// Reconcile moves one started reclaim on by one step.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rc v1alpha1.MachineReclaim
	if err := r.Client.Get(ctx, req.NamespacedName, &rc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if rc.Status.StartedAt == nil || !rc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := &state{r: r, rc: &rc, before: rc.Status.DeepCopy(), now: metav1.NewTime(r.Now()), log: log.FromContext(ctx)}
	var res ctrl.Result
	var err error
	switch rc.Status.Phase {
	case v1alpha1.ReclaimSucceeded, v1alpha1.ReclaimFailed:
		// A Secret left by a failed write of the end is deleted now.
		return ctrl.Result{}, r.deleteTalosconfig(ctx, &rc)
	case "", v1alpha1.ReclaimPending:
		res, err = s.begin(ctx)
	case v1alpha1.ReclaimResetting:
		if rc.Spec.MachineRef != nil {
			res, err = s.resetManaged(ctx)
		} else {
			res, err = s.resetUnmanaged(ctx)
		}
	case v1alpha1.ReclaimJoining:
		res, err = s.join(ctx)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if werr := s.write(ctx); werr != nil {
		if apierrors.IsConflict(werr) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, werr
	}
	if rc.Status.Phase == v1alpha1.ReclaimFailed && rc.Spec.Unmanaged != nil {
		return ctrl.Result{}, r.deleteTalosconfig(ctx, &rc)
	}
	return res, nil
}

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

// newMachine is the TalosMachine through which the node joins.
func (s *state) newMachine() *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.rc.Namespace, Name: s.rc.Name,
			Labels: map[string]string{v1alpha1.LabelMachineReclaim: s.rc.Name},
		},
		Spec: v1alpha1.TalosMachineSpec{ClusterName: s.rc.Spec.ClusterName, Role: s.rc.Spec.Role, Address: s.rc.Status.Address,
			ExpectedFingerprint: s.rc.Spec.ExpectedFingerprint},
	}
}

// begin checks, before anything is reset, everything that would stop the
// node from joining afterwards, and records the address and the machine.
func (s *state) begin(ctx context.Context) (ctrl.Result, error) {
	rc := s.rc
	var cluster v1alpha1.TalosCluster
	if err := s.r.Client.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: rc.Spec.ClusterName}, &cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return s.fail(v1alpha1.ReclaimReasonClusterNotFound, "TalosCluster %s does not exist in namespace %s; nothing was reset", rc.Spec.ClusterName, rc.Namespace)
		}
		return ctrl.Result{}, err
	}
	switch {
	case rc.Spec.MachineRef != nil:
		ref := rc.Spec.MachineRef
		var old v1alpha1.TalosMachine
		if err := s.r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &old); err != nil {
			if apierrors.IsNotFound(err) {
				return s.fail(v1alpha1.ReclaimReasonMachineNotFound, "TalosMachine %s/%s does not exist; nothing was reset", ref.Namespace, ref.Name)
			}
			return ctrl.Result{}, err
		}
		if old.Namespace == rc.Namespace && old.Spec.ClusterName == rc.Spec.ClusterName {
			return s.fail(v1alpha1.ReclaimReasonAlreadyInCluster, "TalosMachine %s/%s is in TalosCluster %s already; nothing was reset",
				ref.Namespace, ref.Name, rc.Spec.ClusterName)
		}
		rc.Status.Address, rc.Status.SourceUID = old.Spec.Address, old.UID
		if old.Status.Hardware != nil {
			rc.Status.SystemUUID = old.Status.Hardware.UUID
		}
	default:
		creds, err := s.r.talosconfig(ctx, rc)
		if errors.Is(err, errBadTalosconfig) {
			return s.fail(v1alpha1.ReclaimReasonBadTalosconfig, "%v; nothing was reset", err)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		// The node answers with the talosconfig now; later, one that does
		// not answer is taken for one that is resetting.
		facts, err := s.r.reach(ctx, rc.Spec.Unmanaged.Address, creds)
		if err != nil {
			return s.fail(v1alpha1.ReclaimReasonResetFailed, "the node at %s does not answer with the talosconfig: %v; nothing was reset",
				rc.Spec.Unmanaged.Address, err)
		}
		rc.Status.Address, rc.Status.SystemUUID = rc.Spec.Unmanaged.Address, facts.UUID
	}
	// The node that answers after the reset is recognised by what it reports
	// now (or by the certificate its console shows).
	switch n := len(rc.Status.SystemUUID); {
	case n > maxUUID:
		rc.Status.SystemUUID = ""
		return s.fail(v1alpha1.ReclaimReasonNoSystemUUID, "the node at %s reports a system UUID of %d bytes, which is not one; nothing was reset", rc.Status.Address, n)
	case n == 0 && rc.Spec.ExpectedFingerprint == "":
		return s.fail(v1alpha1.ReclaimReasonNoSystemUUID, "the node at %s has no system UUID on record: after its reset Ichor could not tell it from another "+
			"(create the reclaim again with spec.expectedFingerprint, the certificate its console will show); nothing was reset", rc.Status.Address)
	}
	// The API server decides now, as it would after the reset, whether the
	// new machine may be created: its name, its address, its cluster.
	if err := s.r.Client.Create(ctx, s.newMachine(), client.DryRunAll); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsAlreadyExists(err) || apierrors.IsBadRequest(err) {
			return s.fail(v1alpha1.ReclaimReasonCannotAdd, "the node could not join afterwards: TalosMachine %s would be refused: %v; nothing was reset",
				rc.Name, apiMessage(err))
		}
		return ctrl.Result{}, err
	}
	rc.Status.MachineName = rc.Name
	rc.Status.Phase = v1alpha1.ReclaimResetting
	s.progress(v1alpha1.ReclaimReasonResetting, "resetting the node at %s to maintenance mode", rc.Status.Address)
	return ctrl.Result{Requeue: true}, nil
}

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
		// Not the node reset: never approved on the reclaim's behalf, and
		// rejected so that no one approves it for the node reclaimed.
		if m.Status.Approval == nil {
			if err := s.r.decide(ctx, &m, v1alpha1.ApprovalRejected, fmt.Sprintf("not the node MachineReclaim %s reset: %s", rc.Name, mismatch)); err != nil {
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
	switch a := m.Status.Approval; {
	case a != nil && a.Decision == v1alpha1.ApprovalRejected:
		return s.fail(v1alpha1.ReclaimReasonRejected, "%s rejected TalosMachine %s: %s", a.By, m.Name, a.Reason)
	case a == nil && known && m.Status.Phase == v1alpha1.MachinePhasePendingApproval:
		if why := s.needsAPerson(); why != "" {
			s.progressOnce(v1alpha1.ReclaimReasonWaitingForApproval,
				"the node at %s is the one reset (%s), but %s: TalosMachine %s waits for an admin's approval (ichor -n %s approve %s)",
				rc.Status.Address, s.proof(&m), why, m.Name, m.Namespace, m.Name)
			return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
		}
		reason := fmt.Sprintf("reclaimed by MachineReclaim %s, started by %s: the node reset (%s)", rc.Name, rc.Status.ReclaimedBy, s.proof(&m))
		if err := s.r.decide(ctx, &m, v1alpha1.ApprovalApproved, reason); err != nil {
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
			m.Name, rc.Spec.ClusterName, rc.Status.ReclaimedBy, m.Spec.Address, s.proof(&m))
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

// apiMessage is the message of an API error, without the client's wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

func graceful(rc *v1alpha1.MachineReclaim) bool {
	return rc.Spec.Graceful == nil || *rc.Spec.Graceful
}
