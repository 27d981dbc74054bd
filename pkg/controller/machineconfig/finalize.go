package machineconfig

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/talos"
)

// Finalizer holds a TalosMachine whose node was sent a config until the
// node is reset: a machine deleted from Ichor must not go on running as a
// member of its cluster with nobody managing it. An administrator may
// remove it by hand to forget a node that is gone for good.
const Finalizer = "ichor.dev/reset-node"

// Reasons and Events of a reset.
const (
	ReasonResetting = "Resetting"
	EventResetting  = "ResettingNode"
	EventNodeReset  = "NodeReset"
)

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
			r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, EventNodeReset, "ResetNode",
				"The node at %s is back in maintenance mode; the machine is released", m.Spec.Address)
			logger.Info("Node reset; releasing the machine")
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
	err := r.reset(ctx, m)
	msg := fmt.Sprintf("resetting the node at %s to maintenance mode before the machine goes", m.Spec.Address)
	if err != nil {
		msg = fmt.Sprintf("cannot reset the node at %s yet: %v; remove finalizer %s by hand to forget a node that is gone for good",
			m.Spec.Address, err, Finalizer)
	} else if reasonOf(m.Status.Conditions, ConditionReady) != ReasonResetting {
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, EventResetting, "ResetNode",
			"Resetting the node at %s (graceful: it leaves etcd and is drained first)", m.Spec.Address)
		logger.Info("Reset the node")
	}
	m.Status.Phase = v1alpha1.MachinePhaseResetting
	s.set(ConditionReady, metav1.ConditionFalse, ReasonResetting, msg)
	if !equality.Semantic.DeepEqual(before, &m.Status) {
		if err := r.Client.Status().Update(ctx, m); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// reset asks the configured node to reset, as os:admin of its cluster.
func (r *Reconciler) reset(ctx context.Context, m *v1alpha1.TalosMachine) error {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, &cluster); err != nil {
		return fmt.Errorf("read TalosCluster %s: %w", m.Spec.ClusterName, err)
	}
	bundle, err := clustersecrets.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		return err
	}
	creds, err := talos.MintCredentials(bundle, role.MakeSet(role.Admin), r.Now(), r.Options.CredentialTTL)
	if err != nil {
		return err
	}
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	if err := checkIdentity(ctx, node, m); err != nil {
		return err
	}
	return node.Reset(ctx, true)
}

// inMaintenance reports whether a node in maintenance mode answers at the
// machine's address: its reset is done.
func (r *Reconciler) inMaintenance(ctx context.Context, m *v1alpha1.TalosMachine) bool {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	node, err := r.Dialer.Maintenance(ctx, m.Spec.Address, talos.Observe())
	if err != nil {
		return false
	}
	defer func() { _ = node.Close() }()
	_, err = node.Facts(ctx)
	return err == nil
}
