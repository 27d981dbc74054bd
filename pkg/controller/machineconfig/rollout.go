package machineconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// disruptionOf says whether a change of effect e to a machine of role takes
// it away, and as what: a reboot takes the node away; an API server restart
// takes a control plane's API server away. Such a change holds the
// cluster's disruption budget and waits until every other machine of the
// cluster is Ready, so one machine at a time goes away and control planes
// keep etcd's and the Kubernetes API's quorum.
func disruptionOf(e v1alpha1.ConfigEffect, role v1alpha1.MachineRole) (v1alpha1.DisruptionAction, bool) {
	switch {
	case e == v1alpha1.ConfigEffectReboot:
		return v1alpha1.DisruptionReboot, true
	case e == v1alpha1.ConfigEffectAPIServerRestart && role == v1alpha1.MachineRoleControlPlane:
		return v1alpha1.DisruptionAPIServerRestart, true
	}
	return "", false
}

// busyMachines are the machines of m's cluster, other than m, that are
// approved but not Ready: while there are any, a disruptive change waits.
func busyMachines(m *v1alpha1.TalosMachine, all []v1alpha1.TalosMachine) []string {
	var busy []string
	for i := range all {
		o := &all[i]
		if o.Name == m.Name || o.Spec.ClusterName != m.Spec.ClusterName || !clusterindex.Member(o) {
			continue
		}
		if o.Status.Phase != v1alpha1.MachinePhaseReady {
			busy = append(busy, fmt.Sprintf("%s (%s)", o.Name, o.Status.Phase))
		}
	}
	slices.Sort(busy)
	return busy
}

// describe summarises a change for an Event: its effect and the fields it touches.
func describe(effect v1alpha1.ConfigEffect, changes []render.Change) string {
	const maxPaths = 5
	paths := make([]string, 0, min(len(changes), maxPaths))
	for i, c := range changes {
		if i == maxPaths {
			paths = append(paths, fmt.Sprintf("and %d more", len(changes)-maxPaths))
			break
		}
		paths = append(paths, c.Path)
	}
	if len(paths) == 0 {
		return string(effect)
	}
	return fmt.Sprintf("%s: %s", effect, strings.Join(paths, ", "))
}

// takeBudget takes the cluster's disruption budget for a change of effect
// that takes m away as action, and reports whether the change must wait:
// while another machine holds the budget, or another machine is not Ready
// (then m does not hold the budget meanwhile, so that what brings that
// machine back is not kept waiting). m's status records why it waits.
func (r *Reconciler) takeBudget(ctx context.Context, s step, effect v1alpha1.ConfigEffect, action v1alpha1.DisruptionAction) (bool, error) {
	m := s.m
	waitFor := func(busy []string, held bool) (bool, error) {
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonWaitingForRollout,
			fmt.Sprintf("a change with effect %s waits until these machines are Ready: %v", effect, busy))
		if held {
			return true, r.budget.Release(ctx, m)
		}
		return true, nil
	}
	// A first look, so that machines waiting for one that is not Ready do
	// not take and give back the budget on every poll; a budget taken
	// before a restart and not used yet is given back.
	busy, err := r.busy(ctx, m)
	if err != nil {
		return true, err
	}
	if len(busy) > 0 {
		return waitFor(busy, s.cluster != nil && disruption.HeldBy(s.cluster, m))
	}
	holder, err := r.budget.Acquire(ctx, m, action)
	if err != nil {
		return true, err
	}
	if holder != nil {
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonWaitingForRollout,
			fmt.Sprintf("a change with effect %s waits for the cluster's disruption budget, held by %s", effect, disruption.Describe(holder)))
		return true, nil
	}
	// Holding the budget, machines read now are all there is: no other
	// action of Ichor takes one away meanwhile.
	if busy, err = r.busy(ctx, m); err != nil {
		return true, errors.Join(err, r.budget.Release(ctx, m))
	}
	if len(busy) > 0 {
		return waitFor(busy, true)
	}
	return false, nil
}

// busy lists, without the cache, the other machines of m's cluster that are not Ready.
func (r *Reconciler) busy(ctx context.Context, m *v1alpha1.TalosMachine) ([]string, error) {
	var all v1alpha1.TalosMachineList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(m.Namespace)); err != nil {
		return nil, fmt.Errorf("list machines of %s: %w", m.Spec.ClusterName, err)
	}
	return busyMachines(m, all.Items), nil
}

// changesTalosCA reports whether changes move machine.ca, the Talos API CA
// a node's API certificate is issued from.
func changesTalosCA(changes []render.Change) bool {
	return slices.ContainsFunc(changes, func(c render.Change) bool {
		return c.Path == "machine.ca" || strings.HasPrefix(c.Path, "machine.ca.")
	})
}

// controlPlanesIssueFrom says which control planes of s's cluster do not
// issue Talos API certificates from ca yet, read from each node (its
// OSRoot, as talosctl rotate-ca reads it), or "" when all do. A worker's
// machine.ca names the CA its certificate comes from, which a control
// plane's trustd signs: a worker that took a new machine.ca before every
// control plane issues from it could get no certificate, so in each phase of
// a CA rotation workers follow the control planes, as talosctl rotate-ca
// orders them.
func (r *Reconciler) controlPlanesIssueFrom(ctx context.Context, s step, ca []byte, creds talos.Credentials) (string, error) {
	var all v1alpha1.TalosMachineList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(s.m.Namespace)); err != nil {
		return "", fmt.Errorf("list machines of %s: %w", s.m.Spec.ClusterName, err)
	}
	var behind []string
	for i := range all.Items {
		cp := &all.Items[i]
		if cp.Spec.ClusterName != s.m.Spec.ClusterName || !clusterindex.Member(cp) || render.MachineRole(cp) != v1alpha1.MachineRoleControlPlane {
			continue
		}
		behind = append(behind, r.issuesFrom(ctx, cp, ca, creds)...)
	}
	slices.Sort(behind)
	return strings.Join(behind, "; "), nil
}

// issuesFrom says how control plane cp does not issue from ca, if it does not.
func (r *Reconciler) issuesFrom(ctx context.Context, cp *v1alpha1.TalosMachine, ca []byte, creds talos.Credentials) []string {
	node, err := r.Dialer.Configured(ctx, cp.Spec.Address, creds)
	if err != nil {
		return []string{fmt.Sprintf("%s does not answer: %v", cp.Name, err)}
	}
	defer func() { _ = node.Close() }()
	got, err := node.TalosCA(ctx)
	if err != nil {
		return []string{fmt.Sprintf("%s does not answer: %v", cp.Name, err)}
	}
	if !bytes.Equal(got.Issuing, ca) {
		return []string{cp.Name + " issues from another CA"}
	}
	return nil
}

// change is a config the node does not run yet, and what taking it does.
type change struct {
	rendered render.Rendered
	effect   v1alpha1.ConfigEffect
	changes  []render.Change
}

// rollOut takes the next step of change c: it waits for what must come
// first (a reboot it was sent with, control planes that issue from a new
// Talos API CA, the cluster's disruption budget), then applies it.
func (r *Reconciler) rollOut(ctx context.Context, s step, node talos.Node, c change, creds talos.Credentials) (ctrl.Result, error) {
	m := s.m
	if m.Status.AppliedConfig.Hash == c.rendered.Hash && c.effect == v1alpha1.ConfigEffectReboot &&
		reasonOf(m.Status.Conditions, v1alpha1.MachineConditionReady) == v1alpha1.MachineReasonRebooting {
		// Sent with a reboot that has not happened yet.
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}

	role := render.MachineRole(m)
	if role == v1alpha1.MachineRoleWorker && changesTalosCA(c.changes) {
		waiting, err := r.controlPlanesIssueFrom(ctx, s, s.bundle.Certs.OS.Crt, creds)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonWaitingForRollout,
				"the change of machine.ca waits until every control plane issues from the new Talos API CA (a control plane's trustd signs this worker's API certificate): "+waiting)
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
	}
	action, disrupts := disruptionOf(c.effect, role)
	if disrupts {
		if wait, err := r.takeBudget(ctx, s, c.effect, action); wait || err != nil {
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, err
		}
	}
	return r.apply(ctx, s, node, c, disrupts)
}

// apply sends c to the node, once it proves to be this machine. A change
// that disrupts (holding the budget) gives the budget back when the node
// does not take it.
func (r *Reconciler) apply(ctx context.Context, s step, node talos.Node, c change, disrupts bool) (ctrl.Result, error) {
	m := s.m
	mode := talos.ApplyNoReboot
	if c.effect == v1alpha1.ConfigEffectReboot {
		mode = talos.ApplyReboot
	}
	var res *talos.ApplyResult
	err := intake.CheckIdentity(ctx, node, m)
	if err == nil {
		res, err = node.ApplyConfiguration(ctx, c.rendered.Config, mode)
	}
	if err != nil {
		if disrupts {
			if err := r.budget.Release(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.applyFailed(s, "ApplyConfig", err), nil
	}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: c.rendered.Hash, Effect: c.effect, AppliedAt: s.now, Contract: c.rendered.Contract}
	what := describe(c.effect, c.changes)
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonApplied, fmt.Sprintf("config %s applied (%s)", short(c.rendered.Hash), what))
	if res.Rebooting {
		m.Status.Phase = v1alpha1.MachinePhaseConfiguring
		s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonRebooting, "the node reboots into its new config")
	}
	if err := s.persist(ctx); err != nil {
		// The node took the config; the next look at it records that.
		return ctrl.Result{}, err
	}
	events.Record(r.Recorder, m, nil, v1alpha1.EventConfigApplied, "ApplyConfig",
		"Applied config %s (%s) in mode %s: %s", short(c.rendered.Hash), what, mode, res.Details)
	log.FromContext(ctx).Info("Applied config", "hash", c.rendered.Hash, "effect", c.effect, "mode", mode.String(), "changes", len(c.changes))
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// applyFailed records a config the node refused or could not take.
func (r *Reconciler) applyFailed(s step, action string, err error) ctrl.Result {
	msg := err.Error()
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonApplyFailed, msg)
	events.Record(r.Recorder, s.m, nil, v1alpha1.EventConfigFailed, action, "The node did not take its config: %s", msg)
	return ctrl.Result{RequeueAfter: r.Options.RetryInterval}
}
