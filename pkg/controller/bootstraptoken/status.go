package bootstraptoken

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
)

// FieldManager owns the BootstrapTokenEnabled condition of a TalosCluster.
const FieldManager = v1alpha1.FieldManagerBootstrapToken

// writeStatus applies the BootstrapTokenEnabled condition of cluster with
// server-side apply under FieldManager, when it changed from before or
// when FieldManager does not own it yet: the cluster health reconciler
// wrote it before this reconciler did, and ownership is taken over as the
// condition stands.
func writeStatus(ctx context.Context, c client.Client, cluster *v1alpha1.TalosCluster, before *v1alpha1.TalosClusterStatus) error {
	condType := v1alpha1.ClusterConditionBootstrapTokenEnabled
	if equality.Semantic.DeepEqual(meta.FindStatusCondition(before.Conditions, condType), meta.FindStatusCondition(cluster.Status.Conditions, condType)) &&
		statusapply.Manages(cluster, FieldManager) {
		return nil
	}
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithStatus(ichorac.TalosClusterStatus().
		WithConditions(statusapply.Conditions(cluster.Status.Conditions, v1alpha1.OwnedConditions(cluster, FieldManager)...)...))
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}
