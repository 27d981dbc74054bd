package machineconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// Finalizer holds a TalosMachine whose node was sent a config until the
// node is reset: a machine deleted from Ichor must not go on running as a
// member of its cluster with nobody managing it. An administrator may
// remove it by hand to forget a node that is gone for good.
const Finalizer = "ichor.dev/reset-node"

// ensureFinalizer adds Finalizer before the first config is sent.
func (r *Reconciler) ensureFinalizer(ctx context.Context, m *v1alpha1.TalosMachine) error {
	if controllerutil.ContainsFinalizer(m, Finalizer) {
		return nil
	}
	orig := m.DeepCopy()
	controllerutil.AddFinalizer(m, Finalizer)
	if err := r.Client.SubResource("finalizers").Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer %s to TalosMachine %s/%s: %w", Finalizer, m.Namespace, m.Name, err)
	}
	return nil
}

// finalize resets the node of a deleted machine gracefully (a control plane
// leaves etcd first) and lets the machine go once the node is back in
// maintenance mode.
func (r *Reconciler) finalize(ctx context.Context, m *v1alpha1.TalosMachine) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(m, Finalizer) {
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx)
	if m.Status.AppliedConfig == nil || r.inMaintenance(ctx, m) {
		if m.Status.AppliedConfig != nil {
			events.Record(r.Recorder, m, nil, v1alpha1.EventNodeReset, "ResetNode",
				"The node at %s is back in maintenance mode; the machine is released", m.Spec.Address)
			logger.Info("Node reset; releasing the machine")
		}
		// The budget goes back before the machine does (a budget whose
		// machine is gone is free anyway, but not at once visibly so).
		if err := r.budget.Release(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
		orig := m.DeepCopy()
		controllerutil.RemoveFinalizer(m, Finalizer)
		if err := r.Client.SubResource("finalizers").Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		return ctrl.Result{}, nil
	}

	s := step{m: m, now: metav1.NewTime(r.Now())}
	before := m.Status.DeepCopy()
	reason := v1alpha1.MachineReasonResetting
	msg := fmt.Sprintf("resetting the node at %s to maintenance mode before the machine goes", m.Spec.Address)
	holder, err := r.budget.Acquire(ctx, m, v1alpha1.DisruptionReset)
	if err == nil && holder != nil {
		reason = v1alpha1.MachineReasonWaitingForDisruptionBudget
		msg = fmt.Sprintf("the node at %s is reset once the cluster's disruption budget is free; it is held by %s",
			m.Spec.Address, disruption.Describe(holder))
	}
	var quorum *quorumError
	var notThis *intake.NotThisMachineError
	if err == nil && holder == nil {
		err = r.reset(ctx, m)
		// Not acting is a decision: the budget goes back. Any other failure
		// keeps it: a node that does not answer may be resetting already (a
		// retry after a lost status write), and is away either way.
		if errors.As(err, &quorum) || errors.As(err, &notThis) {
			if releaseErr := r.budget.Release(ctx, m); releaseErr != nil {
				return ctrl.Result{}, releaseErr
			}
		}
	}
	switch {
	case errors.As(err, &quorum):
		reason = v1alpha1.MachineReasonQuorumAtRisk
		msg = fmt.Sprintf("not resetting the node at %s yet: %v", m.Spec.Address, err)
	case err != nil:
		msg = fmt.Sprintf("cannot reset the node at %s yet: %v; remove finalizer %s by hand to forget a node that is gone for good",
			m.Spec.Address, err, Finalizer)
	case holder == nil && reasonOf(m.Status.Conditions, v1alpha1.MachineConditionReady) != v1alpha1.MachineReasonResetting:
		events.Record(r.Recorder, m, nil, v1alpha1.EventResettingNode, "ResetNode",
			"Resetting the node at %s (graceful: it leaves etcd and is drained first)", m.Spec.Address)
		logger.Info("Reset the node")
	}
	m.Status.Phase = v1alpha1.MachinePhaseResetting
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, reason, msg)
	if !equality.Semantic.DeepEqual(before, &m.Status) {
		if err := configstatus.WriteStatus(ctx, r.Client, m); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// quorumError: resetting the control plane now would cost etcd its quorum.
type quorumError struct{ msg string }

func (e *quorumError) Error() string { return e.msg }

// reset asks the configured node to reset, as os:admin of its cluster.
func (r *Reconciler) reset(ctx context.Context, m *v1alpha1.TalosMachine) error {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, &cluster); err != nil {
		return fmt.Errorf("read TalosCluster %s: %w", m.Spec.ClusterName, err)
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		return err
	}
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), r.Now(), r.Options.CredentialTTL)
	if err != nil {
		return err
	}
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	if err := intake.CheckIdentity(ctx, node, m); err != nil {
		return err
	}
	// An admin's override of the quorum check, which let the delete through,
	// stands for this check too.
	overridden := m.Status.Override != nil && m.Status.Override.Check == v1alpha1.CheckControlPlaneQuorum
	if render.MachineRole(m) == v1alpha1.MachineRoleControlPlane && !overridden {
		if err := r.checkQuorum(ctx, m, creds); err != nil {
			return err
		}
	}
	return node.Reset(ctx, talos.ResetToMaintenance)
}

// checkQuorum decides, from etcd itself at the moment of the reset, whether
// the cluster keeps its quorum without m: the voting members but m's, read
// from another control plane, and of those the ones whose node runs now.
// The admission check decided on phases that may be a minute old; holding
// the disruption budget, nothing else of Ichor takes a member away between
// this check and the reset.
func (r *Reconciler) checkQuorum(ctx context.Context, m *v1alpha1.TalosMachine, creds talos.Credentials) error {
	var all v1alpha1.TalosMachineList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(m.Namespace)); err != nil {
		return fmt.Errorf("list machines of %s: %w", m.Spec.ClusterName, err)
	}
	running := map[string]bool{} // node names of the other control planes that run
	var members []talos.EtcdMember
	var readErr error
	for i := range all.Items {
		o := &all.Items[i]
		if o.UID == m.UID || o.Spec.ClusterName != m.Spec.ClusterName || o.Status.AppliedConfig == nil ||
			render.MachineRole(o) != v1alpha1.MachineRoleControlPlane || o.Status.NodeName == "" {
			continue
		}
		node, err := r.Dialer.Configured(ctx, o.Spec.Address, creds)
		if err != nil {
			continue
		}
		if st, err := node.Status(ctx); err == nil && st.Running() {
			running[o.Status.NodeName] = true
			if members == nil {
				if members, err = node.EtcdMembers(ctx); err != nil {
					readErr, members = err, nil
				}
			}
		}
		_ = node.Close()
	}
	if members == nil {
		if readErr != nil {
			return &quorumError{fmt.Sprintf("no other control plane lists etcd's members (%v)", readErr)}
		}
		return &quorumError{"no other control plane of the cluster runs"}
	}
	var voting, up []string
	var down []string
	for _, mb := range members {
		if mb.Learner || mb.Hostname == m.Status.NodeName {
			continue
		}
		voting = append(voting, mb.Hostname)
		if running[mb.Hostname] {
			up = append(up, mb.Hostname)
		} else {
			down = append(down, mb.Hostname)
		}
	}
	if need := len(voting)/2 + 1; len(voting) == 0 || len(up) < need {
		slices.Sort(down)
		return &quorumError{fmt.Sprintf("without it etcd would have %d voting members, %d of them running, and quorum needs %d; waiting for %s",
			len(voting), len(up), need, strings.Join(down, ", "))}
	}
	return nil
}

// inMaintenance reports whether a node in maintenance mode answers at the
// machine's address: its reset is done.
func (r *Reconciler) inMaintenance(ctx context.Context, m *v1alpha1.TalosMachine) bool {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	return intake.InMaintenance(ctx, r.Dialer, m.Spec.Address)
}
