package taloscluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
)

// FieldManager owns the status fields this reconciler writes.
const FieldManager = v1alpha1.FieldManagerClusterHealth

// ownedConditions are the condition types this reconciler writes: its
// row of the table of status writers.
var ownedConditions = v1alpha1.OwnedConditions(&v1alpha1.TalosCluster{}, FieldManager)

// WriteStatus applies the fields of cluster's status this reconciler owns —
// phase, observed generation, machine counts, versions, bootstrap time, the
// Kubernetes CA certificate and
// its conditions — with server-side apply under FieldManager, so that the
// disruption budget, an admin's override grant and the other controllers'
// conditions are neither overwritten nor dropped, whatever copy of the
// cluster this is.
func WriteStatus(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster) error {
	s := &cluster.Status
	st := ichorac.TalosClusterStatus().WithObservedGeneration(s.ObservedGeneration).
		WithMachines(ichorac.MachineCounts().WithTotal(s.Machines.Total).WithReady(s.Machines.Ready).
			WithControlPlanes(s.Machines.ControlPlanes).WithWorkers(s.Machines.Workers))
	if s.Phase != "" {
		st.WithPhase(s.Phase)
	}
	if s.TalosVersion != "" {
		st.WithTalosVersion(s.TalosVersion)
	}
	if s.KubernetesVersion != "" {
		st.WithKubernetesVersion(s.KubernetesVersion)
	}
	if s.BootstrappedAt != nil {
		st.WithBootstrappedAt(*s.BootstrappedAt)
	}
	if s.KubernetesCA != "" {
		st.WithKubernetesCA(s.KubernetesCA)
	}
	if i := s.Image; i != nil {
		st.WithImage(ichorac.ImageStatus().WithSchematicID(i.SchematicID).WithInstaller(i.Installer).WithFactoryURL(i.FactoryURL))
	}
	st.WithConditions(statusapply.Conditions(s.Conditions, ownedConditions...)...)
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithStatus(st)
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}

// useOverride removes the override grant used from cluster's status: only
// that grant (a JSON patch tests it first), which the override action wrote
// and which no field manager of this reconciler owns. A grant replaced
// meanwhile stays, for the next decision.
func useOverride(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, used *v1alpha1.OverrideStatus) error {
	if _, err := statusapply.RemoveIfUnchanged(ctx, c, cluster, "/status/override", used); err != nil {
		return fmt.Errorf("clear the override used on TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}
