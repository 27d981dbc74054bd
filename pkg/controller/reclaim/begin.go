package reclaim

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

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
