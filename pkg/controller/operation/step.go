package operation

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
)

// stepFunc works on one step: it starts it, or follows it.
type stepFunc func(ctx context.Context, s *step) (ctrl.Result, error)

// kind is what an operation type does with each of its machines.
type kind struct {
	// start takes a Pending step: it checks, takes the budget when the step
	// disrupts, records the step as Running and calls the node.
	start stepFunc
	// follow looks at a Running step: done, failed, or still going.
	follow stepFunc
	// steps are the steps over the targets, in order; nil: one per target.
	steps func(op *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep
	// check, when set, says why the operation must not start (it then
	// fails), or ""; a waitError it returns makes the operation wait.
	check func(r *Reconciler, ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error)
	// finish, when set, runs once every step succeeded, before the
	// operation is; it may run again after a restart.
	finish func(r *Reconciler, ctx context.Context, x *run) error
	// reinstalls: a running step may take its machine's config away (a
	// reset of its system disk) until the machine is installed again.
	reinstalls bool
	// fetches: check fetches into the controller's scratch directory what
	// only the operation's clean-up removes (an etcd-restore's decrypted
	// snapshot), so the finalizer goes on before check runs: no deletion
	// of the operation skips the clean-up.
	fetches bool
}

// kinds are how this controller runs each operation type: one runner per
// type of ichor.Operations, which says everything else about it (its
// targets, who may start it); TestEveryOperationTypeHasARunner checks both
// name the same types.
var kinds = map[v1alpha1.OperationType]kind{
	v1alpha1.OperationReboot:       {start: startReboot, follow: followReboot},
	v1alpha1.OperationTalosUpgrade: {start: startTalosUpgrade, follow: followTalosUpgrade, check: (*Reconciler).checkTalosUpgrade},
	v1alpha1.OperationEtcdDefrag:   {start: startEtcdDefrag, follow: followEtcdDefrag},
	v1alpha1.OperationKubernetesUpgrade: {start: startKubernetes, follow: followKubernetes, steps: kubernetesSteps,
		check: (*Reconciler).checkKubernetes, finish: (*Reconciler).finishKubernetes},
	v1alpha1.OperationEtcdRestore: {start: startRestore, follow: followRestore, steps: restoreSteps,
		check: (*Reconciler).checkRestore, fetches: true},
	v1alpha1.OperationNodeReset: {start: startNodeReset, follow: followNodeReset,
		check: (*Reconciler).checkNodeReset, reinstalls: true},
	v1alpha1.OperationNodeShutdown: {start: startNodeShutdown, follow: followShutdown,
		check: (*Reconciler).checkNodeShutdown},
	v1alpha1.OperationShutdown: {start: startShutdown, follow: followShutdown, steps: shutdownSteps,
		check: (*Reconciler).checkShutdown},
	v1alpha1.OperationCARotation: {start: startCARotationStep, follow: followCARotationStep, steps: caRotationSteps,
		check: (*Reconciler).checkCARotation, finish: (*Reconciler).finishCARotation},
	v1alpha1.OperationKeyRotation: {start: startKeyRotationStep, follow: followKeyRotationStep, steps: keyRotationSteps,
		check: (*Reconciler).checkKeyRotation, finish: (*Reconciler).finishKeyRotation},
}

// step is one step being worked on, with a session to its node.
type step struct {
	r        *Reconciler
	x        *run
	i        int
	m        *v1alpha1.TalosMachine
	cluster  *v1alpha1.TalosCluster
	machines []*v1alpha1.TalosMachine
	node     talos.Node
	creds    talos.Credentials
	bundle   *secretsbundle.Secrets
}

func (s *step) record() *v1alpha1.OperationStep { return &s.x.op.Status.Steps[s.i] }

// work opens a session with the node of step i and starts it (if
// mayStart) or follows it.
func (r *Reconciler) work(ctx context.Context, x *run, i int, mayStart bool) (ctrl.Result, error) {
	op := x.op
	rec := &op.Status.Steps[i]
	if rec.Phase == v1alpha1.OperationPending && !mayStart {
		return ctrl.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("machine", rec.Machine))
	var err error
	if x.cluster == nil {
		if x.cluster, err = r.cluster(ctx, op); err != nil {
			return ctrl.Result{}, fmt.Errorf("read TalosCluster %s: %w", op.Spec.ClusterName, err)
		}
	}
	cluster := x.cluster
	s := &step{r: r, x: x, i: i, cluster: cluster}
	if rec.Phase == v1alpha1.OperationPending {
		// Starting a step checks the whole cluster.
		if s.machines, err = r.machines(ctx, op); err != nil {
			return ctrl.Result{}, err
		}
		for _, m := range s.machines {
			if m.Name == rec.Machine {
				s.m = m
			}
		}
	} else {
		// Following one needs its machine only.
		var m v1alpha1.TalosMachine
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: rec.Machine}, &m)
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("read TalosMachine %s: %w", rec.Machine, err)
		}
		if err == nil && m.Spec.ClusterName == op.Spec.ClusterName {
			s.m = &m
		}
	}
	reinstalling := kinds[op.Spec.Type].reinstalls && rec.Phase == v1alpha1.OperationRunning
	if s.m == nil || (s.m.Status.AppliedConfig == nil && !reinstalling) {
		return s.failed(ctx, "TalosMachine %s is gone from TalosCluster %s, or no longer configured", rec.Machine, cluster.Name)
	}
	if x.bundle == nil {
		if x.bundle, err = bundlestore.Load(ctx, r.Secrets, cluster); err != nil {
			return ctrl.Result{}, fmt.Errorf("load the secrets bundle of TalosCluster %s: %w", cluster.Name, err)
		}
	}
	// Each step its own certificate: one reconcile may start several, and
	// a step's pull may take up to InstallTimeout.
	s.bundle = x.bundle
	if s.creds, err = s.bundle.TalosCredentials(role.MakeSet(role.Admin), r.Now(), r.Options.CredentialTTL); err != nil {
		return ctrl.Result{}, err
	}
	if s.node, err = r.Dialer.Configured(ctx, s.m.Spec.Address, s.creds); err != nil {
		return ctrl.Result{}, err
	}
	defer func() { _ = s.node.Close() }()
	k := kinds[op.Spec.Type]
	if rec.Phase == v1alpha1.OperationPending {
		return k.start(ctx, s)
	}
	return k.follow(ctx, s)
}

// call bounds a short call to the node.
func (s *step) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.r.Options.CallTimeout)
}

// begin records the step as Running, with the node's boot ID when the step
// reboots it, and writes that down before the node is called.
func (s *step) begin(ctx context.Context, bootID, format string, args ...any) error {
	rec := s.record()
	rec.Phase = v1alpha1.OperationRunning
	startedAt := metav1.NewTime(s.r.Now())
	rec.StartedAt = &startedAt
	// This process follows it from its start.
	s.r.stepClockStart(s.x.op, rec, startedAt.Time)
	rec.BootID = bootID
	rec.Message = fmt.Sprintf(format, args...)
	s.x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionTrue, v1alpha1.OperationReasonStepRunning,
		"%s: %s", rec.Machine, rec.Message)
	if err := s.x.persist(ctx); err != nil {
		return err
	}
	events.Record(s.r.Recorder, s.x.op, nil, v1alpha1.EventStepStarted, "Step", "%s: %s", rec.Machine, rec.Message)
	return nil
}

// wait leaves the step as it is, saying what it waits for. A Pending step
// that waits to start says so in the operation's Progressing condition,
// with reason.
func (s *step) wait(format string, args ...any) (ctrl.Result, error) {
	return s.waitFor(v1alpha1.OperationReasonClusterNotHealthy, format, args...)
}

func (s *step) waitFor(reason, format string, args ...any) (ctrl.Result, error) {
	rec := s.record()
	rec.Message = fmt.Sprintf(format, args...)
	if rec.Phase != v1alpha1.OperationPending {
		return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
	}
	s.x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionFalse, reason, "%s: %s", rec.Machine, rec.Message)
	return ctrl.Result{RequeueAfter: s.r.Options.PollInterval}, nil
}

// done ends the step as Succeeded. Its place in the budget goes to the
// next step that takes one in this reconcile, or back when the status is
// written (run.ended).
func (s *step) done(ctx context.Context, format string, args ...any) (ctrl.Result, error) {
	rec := s.record()
	s.x.ended = append(s.x.ended, s.m)
	rec.Phase = v1alpha1.OperationSucceeded
	completedAt := metav1.NewTime(s.r.Now())
	rec.CompletedAt = &completedAt
	rec.Message = fmt.Sprintf(format, args...)
	s.x.set(v1alpha1.OperationConditionProgressing, metav1.ConditionTrue, v1alpha1.OperationReasonStepRunning,
		"%s: %s (%s)", rec.Machine, rec.Message, progressOf(s.x.op))
	events.Record(s.r.Recorder, s.x.op, nil, v1alpha1.EventStepSucceeded, "Step", "%s: %s", rec.Machine, rec.Message)
	log.FromContext(ctx).Info("Step succeeded", "message", rec.Message)
	return ctrl.Result{Requeue: true}, nil
}

// failed ends the step, and with it the operation, as Failed, and gives
// the budget back: the rollout stops there, and nothing else is touched.
func (s *step) failed(ctx context.Context, format string, args ...any) (ctrl.Result, error) {
	rec := s.record()
	if s.m != nil {
		if err := s.r.budget.ReleaseForOperation(ctx, s.x.op.Name, s.m); err != nil {
			return ctrl.Result{}, err
		}
	}
	rec.Phase = v1alpha1.OperationFailed
	completedAt := metav1.NewTime(s.r.Now())
	rec.CompletedAt = &completedAt
	rec.Message = fmt.Sprintf(format, args...)
	events.Record(s.r.Recorder, s.x.op, nil, v1alpha1.EventStepFailed, "Step", "%s: %s", rec.Name(), rec.Message)
	log.FromContext(ctx).Info("Step failed", "message", rec.Message)
	inFlight := slices.ContainsFunc(s.x.op.Status.Steps, func(o v1alpha1.OperationStep) bool { return o.Phase == v1alpha1.OperationRunning })
	if s.x.op.Status.Phase == v1alpha1.OperationRunning && !inFlight {
		s.r.fail(s.x, v1alpha1.OperationReasonStepFailed, "step %s failed: %s", rec.Name(), rec.Message)
	}
	// Otherwise the steps of its batch still in flight end first (advance).
	return ctrl.Result{Requeue: inFlight}, nil
}

// timedOut reports whether a Running step has waited longer than StepTimeout.
func (s *step) timedOut() bool {
	rec := s.record()
	if rec.StartedAt == nil {
		return false
	}
	now := s.r.Now()
	return now.Sub(s.r.stepClockStart(s.x.op, rec, now)) > s.r.Options.StepTimeout
}

// stepClockStart is when the time a Running step has runs from: its start,
// or, for a step another process started (a takeover, a restart), when this
// process first followed it. The time no controller ran is not the node's:
// a leader that dies between recording a reboot step and making the call
// leaves the new leader to make it, more than a lease after the start.
func (r *Reconciler) stepClockStart(op *v1alpha1.TalosOperation, rec *v1alpha1.OperationStep, now time.Time) time.Time {
	key := stepKey(op, rec)
	r.followedMu.Lock()
	defer r.followedMu.Unlock()
	if r.followed == nil {
		r.followed = map[string]time.Time{}
	}
	first, ok := r.followed[key]
	if !ok {
		for k, t := range r.followed {
			if now.Sub(t) > time.Hour+r.Options.StepTimeout {
				delete(r.followed, k)
			}
		}
		first = now
		r.followed[key] = first
	}
	if rec.StartedAt.After(first) {
		return rec.StartedAt.Time
	}
	return first
}

// stepKey names a Running step of op, by its start as stored (seconds),
// in what this process remembers of it.
func stepKey(op *v1alpha1.TalosOperation, rec *v1alpha1.OperationStep) string {
	return fmt.Sprintf("%s/%s/%d", op.UID, rec.Name(), rec.StartedAt.Unix())
}

// rolloutTurn says why the step's machine waits for its turn in a
// rollout, or "".
func (s *step) rolloutTurn() string {
	if s.m == nil {
		return ""
	}
	if c := meta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.MachineReasonWaitingForRollout {
		return "its config waits for its turn: " + c.Message
	}
	return ""
}

// rolloutTimedOut is timedOut for a step that waits for machineconfig to
// give its machine a config: a change that restarts a node's services
// reaches a cluster's machines one at a time, so the step's time runs from
// when its machine's config was applied, if that was later, and not at
// all while the machine waits for its turn in the rollout.
func (s *step) rolloutTimedOut() bool {
	rec := s.record()
	if rec.StartedAt == nil || s.m == nil {
		return s.timedOut()
	}
	if s.rolloutTurn() != "" {
		return false
	}
	start := rec.StartedAt.Time
	if a := s.m.Status.AppliedConfig; a != nil && a.AppliedAt.After(start) {
		start = a.AppliedAt.Time
	}
	return s.r.Now().Sub(start) > s.r.Options.StepTimeout
}
