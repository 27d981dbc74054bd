package taloscluster

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// session is a running control plane of the cluster.
type session struct {
	machine *v1alpha1.TalosMachine
	node    talos.Node
}

// runningControlPlanes opens sessions with the configured control planes
// that run; it also reports the ones that do not. Callers close the sessions.
func (r *Reconciler) runningControlPlanes(ctx context.Context, v *view, creds talos.Credentials) (running []session, down []string) {
	for _, m := range v.controlPlanes() {
		if m.Status.AppliedConfig == nil {
			down = append(down, m.Name+" (not configured)")
			continue
		}
		node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
		if err != nil {
			down = append(down, m.Name)
			continue
		}
		if st, err := node.Status(ctx); err != nil || st.Stage != "running" {
			_ = node.Close()
			down = append(down, m.Name+" (not running)")
			continue
		}
		running = append(running, session{machine: &m, node: node})
	}
	return running, down
}

func closeAll(sessions []session) {
	for _, s := range sessions {
		_ = s.node.Close()
	}
}

// bootstrap starts etcd on the first control plane, once. It first asks
// every configured control plane for etcd members: one that has some means
// etcd was bootstrapped already (perhaps before a restart lost the record),
// and it bootstraps only when every configured control plane runs and none
// has, so it never starts a second etcd cluster. It reports whether the
// cluster is bootstrapped.
func (r *Reconciler) bootstrap(ctx context.Context, v *view, creds talos.Credentials) bool {
	cluster := v.cluster
	if len(v.controlPlanes()) == 0 {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonNoControlPlane, "no approved control plane yet")
		return false
	}
	running, down := r.runningControlPlanes(ctx, v, creds)
	defer closeAll(running)
	for _, s := range running {
		if members, err := s.node.EtcdMembers(ctx); err == nil && len(members) > 0 {
			r.recordBootstrap(v, s.machine, "found etcd running")
			return true
		}
	}
	// An admin may let the bootstrap go ahead with the control planes that
	// run (talosclusters/override); the bootstrap uses up the override.
	override := cluster.Status.Override
	if override != nil && override.Check != v1alpha1.CheckBootstrapWaitsForControlPlanes {
		override = nil
	}
	if len(running) == 0 || (len(down) > 0 && override == nil) {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonWaitingForControlPlane,
			"waiting for every configured control plane to run before bootstrapping etcd: %s; an admin may bootstrap with the running ones through the override subresource (check %s)",
			strings.Join(down, ", "), v1alpha1.CheckBootstrapWaitsForControlPlanes)
		return false
	}
	first := running[0]
	err := first.node.Bootstrap(ctx)
	switch {
	case err == nil || err == talos.ErrAlreadyBootstrapped:
		r.recordBootstrap(v, first.machine, "bootstrapped etcd")
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventBootstrapped, "Bootstrap",
			"Bootstrapped etcd on control plane %s (%s)", first.machine.Name, first.machine.Spec.Address)
		if len(down) > 0 {
			if err := useOverride(ctx, r.Client, cluster, override); err != nil {
				log.FromContext(ctx).Error(err, "The override stays granted")
			}
			events.Record(r.Recorder, cluster, nil, v1alpha1.EventOverrideUsed, "Bootstrap",
				"Bootstrapped etcd without waiting for %s, past the %s check, as %s allowed: %s",
				strings.Join(down, ", "), override.Check, override.By, override.Reason)
		}
		log.FromContext(ctx).Info("Bootstrapped etcd", "machine", first.machine.Name)
		return true
	default:
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonBootstrapFailed, "bootstrap on %s failed: %v", first.machine.Name, err)
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventBootstrapFailed, "Bootstrap",
			"Bootstrap on control plane %s failed: %v", first.machine.Name, err)
		return false
	}
}

func (r *Reconciler) recordBootstrap(v *view, m *v1alpha1.TalosMachine, what string) {
	at := v.now
	v.cluster.Status.BootstrappedAt = &at
	v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionTrue, v1alpha1.ClusterReasonBootstrapped, "%s on control plane %s", what, m.Name)
}
