package machineconfig

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// healthJitter is the share of HealthInterval a check is put off by at
// random, at most.
const healthJitter = 0.1

// healthCheckLater looks at a Ready machine again after HealthInterval
// (and up to a tenth more, at random), at low priority: routine checks of
// thousands of running machines never hold up a machine an event woke
// (one just approved, or changed), which the queue hands out first. The
// jitter spreads machines that became Ready together (a thousand approved
// at once) over the interval, rather than checking them together for ever.
func (r *Reconciler) healthCheckLater() ctrl.Result {
	return ctrl.Result{RequeueAfter: wait.Jitter(r.Options.HealthInterval, healthJitter), Priority: ptr.To(handler.LowPriority)}
}

// converge follows a configured node: to Ready when it runs the rendered
// config, or a rollout step when it does not.
func (r *Reconciler) converge(ctx context.Context, s step, rendered render.Rendered, creds talos.Credentials) (ctrl.Result, error) {
	m := s.m
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() { _ = node.Close() }()

	st, err := node.Status(ctx)
	if err != nil {
		return r.notRunning(s, v1alpha1.MachineReasonNotReachable, fmt.Sprintf("the node's Talos API does not answer over mutual TLS: %v", err)), nil
	}
	m.Status.NodeName = st.Nodename
	recordSecurity(&m.Status, st.Security)
	if !st.Running() {
		msg := "the node is in stage " + st.Stage
		if len(st.Unmet) > 0 {
			msg += fmt.Sprintf(", waiting for %v", st.Unmet)
		}
		reason := v1alpha1.MachineReasonBooting
		if st.Stage == stageShuttingDown {
			reason = v1alpha1.MachineReasonShuttingDown
		}
		return r.notRunning(s, reason, msg), nil
	}

	// What the node runs decides, not what status says was sent: after a
	// restart, or while a reboot is pending, the two differ.
	current, err := node.Config(ctx)
	if err != nil {
		return r.notRunning(s, v1alpha1.MachineReasonNotReachable, err.Error()), nil
	}
	effect, changes, err := r.classify(ctx, node, current, rendered.Config)
	var reset *render.ResetRequiredError
	if errors.As(err, &reset) {
		return r.keepsItsConfig(ctx, s, err)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("compare the config of %s/%s: %w", m.Namespace, m.Name, err)
	}
	if effect == v1alpha1.ConfigEffectNone {
		return r.upToDate(ctx, s, node, rendered)
	}
	return r.rollOut(ctx, s, node, change{rendered: rendered, effect: effect, changes: changes}, creds)
}

// classify says what taking rendered takes the node that runs current.
// What a change takes depends on how the node's Talos applies it
// (render.ApplyModel); the node's own version decides, asked only when the
// answer could differ: for a change that would reboot a node of the older
// model.
func (r *Reconciler) classify(ctx context.Context, node talos.Node, current, rendered []byte) (v1alpha1.ConfigEffect, []render.Change, error) {
	effect, changes, err := render.Classify(current, rendered, render.ApplyWithReboot)
	if err != nil || effect != v1alpha1.ConfigEffectReboot {
		return effect, changes, err
	}
	version, err := node.Version(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("read the node's Talos version: %w", err)
	}
	if render.ApplyModelOf(version) == render.ApplyWithReboot {
		return effect, changes, nil
	}
	return render.Classify(current, rendered, render.ApplyLive)
}

// keepsItsConfig records a node whose new config Talos takes only at
// install (err says why): the node keeps what it runs, and runs; it is
// Ready, and gives back the budget a change it took it for held. A
// node-reset installs the new config.
func (r *Reconciler) keepsItsConfig(ctx context.Context, s step, err error) (ctrl.Result, error) {
	m := s.m
	if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); prev == nil || prev.Message != err.Error() {
		events.Record(r.Recorder, m, nil, v1alpha1.EventConfigFailed, "CompareConfig", "%v", err)
	}
	m.Status.Phase = v1alpha1.MachinePhaseReady
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonResetRequired, err.Error())
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionTrue, v1alpha1.MachineReasonRunning, fmt.Sprintf("node %s is running and ready, with the config it had", m.Status.NodeName))
	if err := r.back(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.healthCheckLater(), nil
}

// upToDate records a node that runs its rendered config: Ready, once a
// control plane's kube-apiserver serves a change that restarted it.
func (r *Reconciler) upToDate(ctx context.Context, s step, node talos.Node, rendered render.Rendered) (ctrl.Result, error) {
	m := s.m
	if err := r.recordRunning(ctx, s, rendered); err != nil {
		return ctrl.Result{}, err
	}
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate, fmt.Sprintf("the node runs config %s", short(rendered.Hash)))
	if restartsAPIServer(s.cluster, m) {
		// Back once its kube-apiserver serves the change: only then may
		// the next control plane restart its own.
		waiting, err := r.apiServerWaits(ctx, s, node, s.bundle)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			m.Status.Phase = v1alpha1.MachinePhaseConfiguring
			s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonAPIServerRestarting, waiting)
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
	}
	m.Status.Phase = v1alpha1.MachinePhaseReady
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionTrue, v1alpha1.MachineReasonRunning, fmt.Sprintf("node %s is running and ready", m.Status.NodeName))
	if err := r.back(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.healthCheckLater(), nil
}

// recordRunning records rendered as the applied config of a node that
// runs it, when status does not say so already: applied by this
// reconciler just now (a cached copy of m may predate the write that
// recorded it, effect included), or before a restart lost the record.
func (r *Reconciler) recordRunning(ctx context.Context, s step, rendered render.Rendered) error {
	m := s.m
	if m.Status.AppliedConfig.Hash == rendered.Hash {
		// Recorded before status said the contract: the config that runs says it.
		m.Status.AppliedConfig.Contract = rendered.Contract
		return nil
	}
	var fresh v1alpha1.TalosMachine
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), &fresh)
	switch {
	case err == nil && fresh.Status.AppliedConfig != nil && fresh.Status.AppliedConfig.Hash == rendered.Hash:
		m.Status.AppliedConfig = fresh.Status.AppliedConfig
		m.Status.AppliedConfig.Contract = rendered.Contract
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("read TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	default:
		m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectNone, AppliedAt: s.now, Contract: rendered.Contract}
	}
	return nil
}

// back gives back the cluster's disruption budget if m, Ready now, holds
// it: the next machine may go. Status first, so that the next decision
// sees this machine Ready.
func (r *Reconciler) back(ctx context.Context, s step) error {
	if !disruption.HeldBy(s.cluster, s.m) {
		return nil
	}
	if err := s.persist(ctx); err != nil {
		return err
	}
	return r.budget.Release(ctx, s.m)
}

// stageShuttingDown is Talos's machine stage while it shuts down.
const stageShuttingDown = "shutting down"

// notRunning records a configured node that is not (yet) running its config.
// Within the boot after an apply it is Configuring; a node not answering,
// or shutting down (it stays off until powered on), is Unreachable.
func (r *Reconciler) notRunning(s step, reason, msg string) ctrl.Result {
	m := s.m
	prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionReady)
	booting := prev != nil && (prev.Reason == v1alpha1.MachineReasonBooting || prev.Reason == v1alpha1.MachineReasonRebooting)
	if booting && reason == v1alpha1.MachineReasonNotReachable {
		reason = prev.Reason // down while it boots is expected
	}
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, reason, msg)
	if reason == v1alpha1.MachineReasonNotReachable || reason == v1alpha1.MachineReasonShuttingDown {
		m.Status.Phase = v1alpha1.MachinePhaseUnreachable
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}
	}
	m.Status.Phase = v1alpha1.MachinePhaseConfiguring
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}
}
