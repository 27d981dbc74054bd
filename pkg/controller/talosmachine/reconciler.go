// Package talosmachine takes TalosMachines in: it contacts each machine's
// maintenance-mode API, pins the certificate it presents on first contact,
// records its hardware facts and Talos version, and keeps checking that the
// node still presents the pinned certificate while it awaits approval.
// Configuring approved machines belongs to other reconcilers; this one stops
// at a machine that has a config applied.
package talosmachine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
)

// conflictRetry is the wait after losing a race to update a machine.
const conflictRetry = time.Second

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "talosmachine-intake"

// Options tune the reconciler; zero values take the defaults below.
type Options struct {
	// ContactTimeout bounds one contact with a node. Default 20s.
	ContactTimeout time.Duration
	// RecheckInterval is how often a reachable machine awaiting approval is
	// contacted again to check it still presents the pinned certificate.
	// Default 1m.
	RecheckInterval time.Duration
	// MinRetry and MaxRetry bound the wait before contacting an
	// unreachable machine again. Defaults 5s and 5m.
	MinRetry, MaxRetry time.Duration
	// MaxConcurrentReconciles is how many machines are contacted at once. Default 4.
	MaxConcurrentReconciles int
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.ContactTimeout, 20*time.Second)
	defaults.Positive(&o.RecheckInterval, time.Minute)
	defaults.Positive(&o.MinRetry, 5*time.Second)
	defaults.Positive(&o.MaxRetry, 5*time.Minute)
	defaults.Positive(&o.MaxConcurrentReconciles, 4)
	return o
}

// Reconciler takes TalosMachines in.
type Reconciler struct {
	Client   client.Client
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler. It wakes on a machine's
// creation, a change of its spec, deletion, or an approval decision, but not
// on the status it writes itself: its own requeues pace the contacts.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	if err := indexAddresses(context.Background(), mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosMachine{}, builder.WithPredicates(relevantChange())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
}

// Reconcile contacts one machine and records what it found.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var m v1alpha1.TalosMachine
	if err := r.Client.Get(ctx, req.NamespacedName, &m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() || m.Status.AppliedConfig != nil {
		// Deletion and configured machines belong to other reconcilers.
		return ctrl.Result{}, nil
	}

	pinned := ""
	if m.Status.Maintenance != nil {
		pinned = m.Status.Maintenance.CertificateFingerprint
	}
	logger = logger.WithValues("address", m.Spec.Address, "pinned", pinned != "")
	if !v1alpha1.HoldsAddress(&m) {
		holder, err := r.claimedBy(ctx, &m)
		if err != nil {
			return ctrl.Result{}, err
		}
		if holder != "" {
			return r.addressInUse(ctx, &m, holder)
		}
	}
	contactCtx, cancel := context.WithTimeout(ctx, r.Options.ContactTimeout)
	result := intake.Contact(contactCtx, r.Dialer, m.Spec.Address, pinned, m.Spec.ExpectedFingerprint)
	cancel()
	if ctx.Err() != nil {
		// Shutting down: what the contact saw says nothing about the node.
		return ctrl.Result{}, ctx.Err()
	}

	before := m.Status.DeepCopy()
	now := metav1.NewTime(r.Now())
	change := intake.Record(&m.Status, m.Generation, result, now)
	if !equality.Semantic.DeepEqual(before, &m.Status) {
		if err := intake.WriteStatus(ctx, r.Client, &m); err != nil {
			if apierrors.IsConflict(err) {
				// The machine changed meanwhile (perhaps only its status, which
				// the predicate does not pass on): look again shortly.
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update status of TalosMachine %s: %w", req, err)
		}
	}
	r.announce(&m, result, change)

	if result.Err != nil {
		retry := wait.Jitter(intake.RetryAfter(&m.Status, now.Time, r.Options.MinRetry, r.Options.MaxRetry), 0.1)
		logger.Info("Machine not reached", "error", result.Err.Error(), "retryAfter", retry)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	logger.V(1).Info("Machine contacted", "fingerprint", result.Fingerprint, "phase", m.Status.Phase)
	// A routine recheck waits behind machines an event woke.
	return ctrl.Result{RequeueAfter: wait.Jitter(r.Options.RecheckInterval, 0.1), Priority: ptr.To(handler.LowPriority)}, nil
}

// addressInUse records that another machine has m's address, contacts
// nothing, and looks again later.
func (r *Reconciler) addressInUse(ctx context.Context, m *v1alpha1.TalosMachine, holder string) (ctrl.Result, error) {
	before := m.Status.DeepCopy()
	// Another tenant's machine is not named: its namespace is not this one's to know.
	if ns, _, _ := strings.Cut(holder, "/"); ns != m.Namespace {
		holder = "a TalosMachine in another namespace"
	} else {
		holder = "TalosMachine " + strings.TrimPrefix(holder, ns+"/")
	}
	intake.RecordAddressInUse(&m.Status, m.Generation, m.Spec.Address, holder, metav1.NewTime(r.Now()))
	if !equality.Semantic.DeepEqual(before, &m.Status) {
		if err := intake.WriteStatus(ctx, r.Client, m); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update status of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
		}
		events.Record(r.Recorder, m, nil, v1alpha1.EventAddressInUse, "Contact",
			"Not contacting the node at %s: %s has that address first", m.Spec.Address, holder)
	}
	return ctrl.Result{RequeueAfter: wait.Jitter(r.Options.RecheckInterval, 0.1), Priority: ptr.To(handler.LowPriority)}, nil
}

// announce emits the Events a person following the machine wants to see.
func (r *Reconciler) announce(m *v1alpha1.TalosMachine, result intake.Result, ch intake.Change) {
	const action = "ContactMaintenanceAPI"
	if ch.Recovered {
		events.Record(r.Recorder, m, nil, v1alpha1.EventReachable, action,
			"The node at %s answers again", result.Address)
	}
	if ch.Pinned {
		events.Record(r.Recorder, m, nil, v1alpha1.EventCertificatePinned, action,
			"Pinned maintenance certificate with SPKI fingerprint %s presented at %s; awaiting approval", result.Fingerprint, result.Address)
	}
	if ch.Mismatch != nil {
		events.Record(r.Recorder, m, nil, v1alpha1.EventCertificateMismatch, action,
			"%s; nothing was sent to it", ch.Mismatch.Error())
	}
	if ch.Unreachable {
		events.Record(r.Recorder, m, nil, v1alpha1.EventUnreachable, action,
			"%s", intake.UnreachableMessage(result.Address))
	}
}
