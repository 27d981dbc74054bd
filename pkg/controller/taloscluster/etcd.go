package taloscluster

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// checkEtcd compares etcd's voting members with the control planes.
func (r *Reconciler) checkEtcd(ctx context.Context, v *view, creds talos.Credentials) {
	running, _ := r.runningControlPlanes(ctx, v, creds)
	defer closeAll(running)
	if len(running) == 0 {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonEtcdUnreadable, "no control plane answers")
		return
	}
	members, err := running[0].node.EtcdMembers(ctx)
	if err != nil {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonEtcdUnreadable, "list etcd members on %s: %v", running[0].machine.Name, err)
		return
	}
	voting := map[string]bool{}
	for _, mb := range members {
		if !mb.Learner {
			voting[mb.Hostname] = true
		}
	}
	var missing []string
	for _, m := range v.controlPlanes() {
		if m.Status.NodeName == "" || !voting[m.Status.NodeName] {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) > 0 {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonMembersMissing,
			"%d voting members; not yet members: %s", len(voting), strings.Join(missing, ", "))
		return
	}
	v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionTrue, v1alpha1.ClusterReasonMembersHealthy, "%d voting members, one per control plane", len(voting))
}
