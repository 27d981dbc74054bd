package taloscluster

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/render"
)

// summarize sets MachinesReady, Ready, the phase and the observed Talos version.
func (r *Reconciler) summarize(v *view) {
	s := &v.cluster.Status
	var notReady []string
	versions := map[string]bool{}
	for _, m := range v.machines {
		if m.Status.Phase != v1alpha1.MachinePhaseReady {
			notReady = append(notReady, fmt.Sprintf("%s (%s)", m.Name, cmp.Or(string(m.Status.Phase), "new")))
		}
		if m.Status.TalosVersion != "" {
			versions[m.Status.TalosVersion] = true
		}
	}
	if len(versions) == 1 {
		for ver := range versions {
			s.TalosVersion = ver
		}
	}
	switch {
	case s.Machines.ControlPlanes == 0:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNoControlPlane, "no approved control plane")
	case len(notReady) > 0:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonMachinesNotReady,
			"%d of %d machines Ready; waiting for %s", s.Machines.Ready, len(v.machines), strings.Join(notReady, ", "))
	default:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady,
			"%d control planes and %d workers Ready", s.Machines.ControlPlanes, s.Machines.Workers)
	}

	var pending []string
	for _, t := range []string{v1alpha1.ClusterConditionSecretsReady, v1alpha1.ClusterConditionMachinesReady, v1alpha1.ClusterConditionBootstrapped,
		v1alpha1.ClusterConditionEtcdHealthy, v1alpha1.ClusterConditionKubernetesAPIReachable, v1alpha1.ClusterConditionNodesReady} {
		if !meta.IsStatusConditionTrue(s.Conditions, t) {
			pending = append(pending, t)
		}
	}
	wasReady := s.Phase == v1alpha1.ClusterPhaseReady || s.Phase == v1alpha1.ClusterPhaseDegraded
	switch {
	case len(pending) == 0:
		v.set(v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady, "the cluster is bootstrapped; its machines, Kubernetes API and Nodes are ready")
		s.Phase = v1alpha1.ClusterPhaseReady
	default:
		v.set(v1alpha1.ClusterConditionReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNotReady, "not yet: %s", strings.Join(pending, ", "))
		switch {
		case wasReady:
			s.Phase = v1alpha1.ClusterPhaseDegraded
		case len(v.machines) == 0:
			s.Phase = v1alpha1.ClusterPhasePending
		default:
			s.Phase = v1alpha1.ClusterPhaseProvisioning
		}
	}
}

// announce emits the Events of a cluster turning Ready or losing it.
func (r *Reconciler) announce(before *v1alpha1.TalosClusterStatus, cluster *v1alpha1.TalosCluster) {
	if before.Phase == cluster.Status.Phase {
		return
	}
	switch cluster.Status.Phase {
	case v1alpha1.ClusterPhaseReady:
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventClusterReady, "CheckHealth",
			"Cluster is Ready: %d control planes, %d workers", cluster.Status.Machines.ControlPlanes, cluster.Status.Machines.Workers)
	case v1alpha1.ClusterPhaseDegraded:
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventClusterDegraded, "CheckHealth",
			"Cluster is no longer Ready: %s", meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionReady).Message)
	}
}

// countMachines records cluster's machine counts and returns its members
// (approved, not leaving), sorted by name.
func countMachines(cluster *v1alpha1.TalosCluster, machines []v1alpha1.TalosMachine) []v1alpha1.TalosMachine {
	counts := &cluster.Status.Machines
	var members []v1alpha1.TalosMachine
	*counts = v1alpha1.MachineCounts{}
	for _, m := range machines {
		// Rejected machines are not the cluster's, and deleted ones are leaving it.
		if a := m.Status.Approval; (a != nil && a.Decision == v1alpha1.ApprovalRejected) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		counts.Total++
		if !clusterindex.Member(&m) {
			continue
		}
		members = append(members, m)
		if render.MachineRole(&m) == v1alpha1.MachineRoleControlPlane {
			counts.ControlPlanes++
		} else {
			counts.Workers++
		}
		if m.Status.Phase == v1alpha1.MachinePhaseReady {
			counts.Ready++
		}
	}
	slices.SortFunc(members, func(a, b v1alpha1.TalosMachine) int { return cmp.Compare(a.Name, b.Name) })
	return members
}
