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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// apiMessage is the message of an API error, without the client's wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}
