// Package operation runs started TalosOperations, each type of
// ichor.Operations with its runner (kinds, step.go): most take one step per
// machine, control planes first and one node at a time (workers of a
// batched type in batches of spec.maxUnavailable); kubernetes-upgrade one
// step per machine and component (kubernetes.go); etcd-restore, shutdown
// and the rotations steps of their own.
//
// Safety: a step that takes a node or an etcd member away holds its
// cluster's disruption budget (package disruption) from before it touches
// the node until the node is back, and is taken only while every other
// machine of the cluster is Ready and, for a control plane, while etcd keeps
// its quorum without it, as read from the other members at that moment.
// Only one started operation per cluster runs; the others wait, Pending.
//
// Resuming: a step is recorded as Running, with the node's boot ID, before
// the node is asked to reboot, and is decided from the node's own state
// afterwards: a node that answers with another boot ID has rebooted. So a
// controller restarted at any point neither repeats a completed step nor
// skips one.
//
// Deleting a running operation stops it after the step in flight: the
// finalizer ichor.dev/operation-step holds the object until that node is
// back (or its step failed) and the budget is given back; no further step
// starts. An etcd-restore holds the finalizer from before it fetches its
// snapshot, Pending still, so that its deletion removes the decrypted
// snapshot too (removeScratch).
package operation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "talosoperation"

// Finalizer holds a running operation until its step in flight has ended.
const Finalizer = "ichor.dev/operation-step"

// FieldManager owns what this controller applies to TalosMachine status:
// the Talos version a node runs after an upgrade.
const FieldManager = v1alpha1.FieldManagerOperation

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// CallTimeout bounds one short call to a node. Default 30s.
	CallTimeout time.Duration
	// InstallTimeout bounds pulling the installer image and running it. Default 15m.
	InstallTimeout time.Duration
	// PollInterval is how often a started operation that waits (for the
	// cluster, another operation, the budget) is looked at. Default 2s.
	PollInterval time.Duration
	// StepPollInterval is how often the node of a step in flight is looked
	// at: one node per cluster at a time (a batch of workers at most), so
	// often enough that noticing a node is back adds little to its own
	// reboot time. Default 50ms.
	StepPollInterval time.Duration
	// StepTimeout is how long a node may take to come back from its reboot
	// before its step fails. Default 15m.
	StepTimeout time.Duration
	// CredentialTTL is the lifetime of the os:admin certificate minted per session. Default 10m.
	CredentialTTL time.Duration
	// InstallImage is the installer image whose repository an upgrade pulls
	// from when a node's config names none (ichor-controller's --install-image).
	InstallImage string
	// MaxConcurrentReconciles is how many operations are worked on at once. Default 4.
	MaxConcurrentReconciles int
	// ScratchDir holds an etcd-restore's verified snapshot until the
	// operation ends (ichor-controller's --scratch-dir); default the
	// system's temporary directory.
	ScratchDir string
	// BackupVolumeDir is where volume backup targets are
	// (ichor-controller's --backup-volume-dir).
	BackupVolumeDir string
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.InstallTimeout, 15*time.Minute)
	defaults.Positive(&o.PollInterval, 2*time.Second)
	defaults.Positive(&o.StepPollInterval, 50*time.Millisecond)
	defaults.Positive(&o.StepTimeout, 15*time.Minute)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	defaults.Positive(&o.MaxConcurrentReconciles, 4)
	return o
}

// Reconciler runs started TalosOperations.
type Reconciler struct {
	// Client reads (cached) and writes Ichor objects.
	Client client.Client
	// APIReader reads without the cache where a decision must not rest on a
	// stale copy: the cluster and its budget, the machine a step follows,
	// the operations that run.
	APIReader client.Reader
	// Secrets reads bundle Secrets without a cache.
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Workload opens a managed cluster's API at endpoint as the controller's
	// own identity there; nil signs a short-lived client certificate from
	// the bundle (package workload). Tests give a fake.
	Workload func(bundle *secrets.Bundle, endpoint string) (kubernetes.Interface, error)

	budget   *disruption.Budget
	kubes    workload.Clients
	prepulls prepulls
	// tries records when each Pending step was last tried (triedRecently).
	triesMu sync.Mutex
	tries   map[string]time.Time
	// followed records when this process first followed each Running step
	// (stepClockStart), by the step's start.
	followedMu sync.Mutex
	followed   map[string]time.Time
	// accepted records when the node of each Running step accepted its
	// reset, by the step's start (stepKey): a status write of the
	// acceptance that failed is made again from it (recallAcceptance).
	acceptedMu sync.Mutex
	accepted   map[string]time.Time
}

// SetupWithManager registers the reconciler. It wakes on a started,
// created or deleted operation; steps in flight and waiting operations are
// looked at again every StepPollInterval, or PollInterval.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	r.budget = &disruption.Budget{Client: r.Client, Reader: r.APIReader, Now: r.Now}
	if err := mgr.Add(manager.RunnableFunc(r.sweepAtStart)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosOperation{}, builder.WithPredicates(startedOrDeleted())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
}

// sweepAtStart sweeps the scratch directory (sweepScratch) once the
// controller leads, trying again until it could.
func (r *Reconciler) sweepAtStart(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName(ControllerName)
	for {
		err := r.sweepScratch(ctx)
		if err == nil {
			return nil
		}
		logger.Error(err, "Sweeping the scratch directory of etcd-restore snapshots no operation needs")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * r.Options.PollInterval):
		}
	}
}

// startedOrDeleted passes the update that starts an operation and the one
// that marks it for deletion; its own status writes do not wake it.
func startedOrDeleted() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosOperation)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosOperation)
			if !ok1 || !ok2 {
				return false
			}
			return (o.Status.StartedAt == nil && n.Status.StartedAt != nil) ||
				(o.DeletionTimestamp.IsZero() && !n.DeletionTimestamp.IsZero())
		},
	}
}

// run is one reconcile of one operation.
type run struct {
	op  *v1alpha1.TalosOperation
	now metav1.Time
	// cluster and bundle are read once per reconcile, for every step it
	// works on.
	cluster *v1alpha1.TalosCluster
	bundle  *secretsbundle.Secrets
	// persist writes the operation's status now if it changed: a step is
	// recorded before its node is called.
	persist func(context.Context) error
	// ended are the machines whose steps ended in this reconcile and may
	// still hold a place in the budget: the next step's acquire hands it
	// over (one write instead of a release and an acquire), and persist
	// gives back what is left first, so the operation's status never
	// records a step ended whose machine still holds the budget.
	ended []*v1alpha1.TalosMachine
}

func (x *run) set(condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&x.op.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
		ObservedGeneration: x.op.Generation, LastTransitionTime: x.now,
	})
}

// Reconcile moves one started operation on: it follows the steps in flight
// and starts those that may start, the next one as soon as one ends.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var op v1alpha1.TalosOperation
	if err := r.Client.Get(ctx, req.NamespacedName, &op); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if op.Status.StartedAt == nil && op.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // created Pending; only start moves it on
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("cluster", op.Spec.ClusterName, "type", op.Spec.Type))

	written := op.Status.DeepCopy()
	x := &run{op: &op, now: metav1.NewTime(r.Now())}
	x.persist = func(ctx context.Context) error {
		for _, m := range x.ended {
			if err := r.budget.ReleaseForOperation(ctx, op.Name, m); err != nil {
				return err
			}
		}
		x.ended = nil
		if equality.Semantic.DeepEqual(written, &op.Status) {
			return nil
		}
		op.Status.ObservedGeneration = op.Generation
		if err := r.Client.Status().Update(ctx, &op); err != nil {
			return fmt.Errorf("write the status of TalosOperation %s/%s: %w", op.Namespace, op.Name, err)
		}
		written = op.Status.DeepCopy()
		return nil
	}

	var result ctrl.Result
	var err error
	switch {
	case !op.DeletionTimestamp.IsZero():
		result, err = r.stop(ctx, x)
	case op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed:
		return ctrl.Result{}, r.finalize(ctx, &op)
	case op.Status.Phase == v1alpha1.OperationRunning:
		result, err = r.advance(ctx, x)
	default:
		result, err = r.begin(ctx, x)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !op.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(&op, Finalizer) {
		return ctrl.Result{}, nil // released: the object is gone
	}
	if err := x.persist(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed {
		return ctrl.Result{}, r.finalize(ctx, &op)
	}
	return result, nil
}

// advance works on the steps in flight: the first that has not succeeded
// or, for workers with spec.maxUnavailable above 1, that many. When a step
// ends, the next starts in the same reconcile (its record, written before
// its node is called, carries the ended one's too). It ends the operation
// when no step is left, or once a step failed and the others in flight are
// done.
func (r *Reconciler) advance(ctx context.Context, x *run) (ctrl.Result, error) {
	op := x.op
	for range len(op.Status.Steps) + 1 {
		window, err := r.window(ctx, op)
		if err != nil {
			return ctrl.Result{}, err
		}
		failed := slices.IndexFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool { return s.Phase == v1alpha1.OperationFailed })
		if failed >= 0 {
			window = slices.DeleteFunc(window, func(i int) bool { return op.Status.Steps[i].Phase != v1alpha1.OperationRunning })
		}
		if len(window) == 0 {
			if failed >= 0 {
				rec := op.Status.Steps[failed]
				r.fail(x, v1alpha1.OperationReasonStepFailed, "step %s failed: %s", rec.Name(), rec.Message)
				return ctrl.Result{}, nil
			}
			if finish := kinds[op.Spec.Type].finish; finish != nil {
				if err := finish(r, ctx, x); err != nil {
					return ctrl.Result{}, err
				}
			}
			r.succeed(x)
			return ctrl.Result{}, nil
		}
		var result ctrl.Result
		ended := false
		for _, i := range window {
			running := op.Status.Steps[i].Phase == v1alpha1.OperationRunning
			// A step that failed meanwhile stops the starting of others.
			failedNow := slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool { return s.Phase == v1alpha1.OperationFailed })
			if !running && (failedNow || r.triedRecently(op, i)) {
				result = soonest(result, ctrl.Result{RequeueAfter: r.Options.PollInterval})
				continue
			}
			res, err := r.work(ctx, x, i, !failedNow)
			if err != nil {
				return ctrl.Result{}, err
			}
			result = soonest(result, res)
			if op.Status.Phase != v1alpha1.OperationRunning {
				return result, nil
			}
			// A step that ended as it started (a dry run's) counts too.
			now := op.Status.Steps[i].Phase
			ended = ended || (now == v1alpha1.OperationSucceeded || now == v1alpha1.OperationFailed)
		}
		if !ended {
			return result, nil
		}
	}
	return ctrl.Result{Requeue: true}, nil
}

// window is the indexes of the steps to work on now: the first step not
// ended, alone, unless it is a worker's and spec.maxUnavailable lets more
// go at once; then up to that many steps not ended, as long as they are
// workers' (steps run control planes first, or, in a shutdown, last).
func (r *Reconciler) window(ctx context.Context, op *v1alpha1.TalosOperation) ([]int, error) {
	var open []int
	for i, s := range op.Status.Steps {
		if s.Phase == v1alpha1.OperationPending || s.Phase == v1alpha1.OperationRunning {
			open = append(open, i)
		}
	}
	n := maxUnavailable(op)
	if len(open) <= 1 || n == 1 {
		return open[:min(len(open), 1)], nil
	}
	machines, err := r.machines(ctx, op)
	if err != nil {
		return nil, err
	}
	worker := map[string]bool{}
	for _, m := range machines {
		worker[m.Name] = render.MachineRole(m) != v1alpha1.MachineRoleControlPlane
	}
	end := 0
	for end < min(len(open), n) && worker[op.Status.Steps[open[end]].Machine] {
		end++
	}
	return open[:max(end, 1)], nil
}

// triedRecently reports whether the Pending step i of op was tried less
// than PollInterval ago, and records a try now otherwise: a step that
// waits to start (for the cluster, the budget, a drain) is looked at every
// PollInterval, however often the steps in flight beside it are.
func (r *Reconciler) triedRecently(op *v1alpha1.TalosOperation, i int) bool {
	key := string(op.UID) + "/" + op.Status.Steps[i].Name()
	now := r.Now()
	r.triesMu.Lock()
	defer r.triesMu.Unlock()
	if last, ok := r.tries[key]; ok && now.Sub(last) < r.Options.PollInterval {
		return true
	}
	if r.tries == nil {
		r.tries = map[string]time.Time{}
	}
	for k, t := range r.tries {
		if now.Sub(t) > time.Hour {
			delete(r.tries, k)
		}
	}
	r.tries[key] = now
	return false
}

// soonest combines the results of steps worked on in one reconcile.
func soonest(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case a.RequeueAfter == 0 || b.RequeueAfter == 0:
		return ctrl.Result{Requeue: true}
	}
	return ctrl.Result{RequeueAfter: min(a.RequeueAfter, b.RequeueAfter)}
}

func (r *Reconciler) cluster(ctx context.Context, op *v1alpha1.TalosOperation) (*v1alpha1.TalosCluster, error) {
	var c v1alpha1.TalosCluster
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: op.Spec.ClusterName}, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// machines lists the approved machines of op's cluster from the informer
// cache (by the cluster index): this is the health gate a step passes
// before it starts. What keeps two disruptions apart is the budget, taken
// by a write conditional on the cluster's resourceVersion, and a control
// plane's quorum is read from etcd itself at that moment; a list of 100
// machines fresh from the API server at every step would cost more than
// the gate gains from it.
func (r *Reconciler) machines(ctx context.Context, op *v1alpha1.TalosOperation) ([]*v1alpha1.TalosMachine, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(op.Namespace, op.Spec.ClusterName)...); err != nil {
		return nil, fmt.Errorf("list the machines of TalosCluster %s: %w", op.Spec.ClusterName, err)
	}
	var out []*v1alpha1.TalosMachine
	for i := range list.Items {
		m := &list.Items[i]
		if m.Status.Approval != nil && m.Status.Approval.Decision == v1alpha1.ApprovalApproved {
			out = append(out, m)
		}
	}
	return out, nil
}
