package machineconfig

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// step is what one reconcile found and did, to be written into status.
type step struct {
	m *v1alpha1.TalosMachine
	// cluster is m's cluster, as the cache has it, and bundle its secrets.
	cluster *v1alpha1.TalosCluster
	bundle  *secrets.Bundle
	// kubernetesAccepted are the Kubernetes CAs accepted beside the
	// bundle's during a CA rotation, which its clients trust too.
	kubernetesAccepted [][]byte
	now                metav1.Time
	// persist writes m's status now if it changed. A rollout step calls it
	// before giving back its cluster's disruption budget, so the next
	// decision sees this one.
	persist func(context.Context) error
}

func (s step) set(condType string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.m.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.m.Generation, LastTransitionTime: s.now,
	})
}

// changed reports whether condType now has another status or reason than in before.
func changed(before *v1alpha1.TalosMachineStatus, after *v1alpha1.TalosMachineStatus, condType string) bool {
	b, a := meta.FindStatusCondition(before.Conditions, condType), meta.FindStatusCondition(after.Conditions, condType)
	return a != nil && (b == nil || b.Status != a.Status || b.Reason != a.Reason)
}

// short is the first 12 characters of a config hash, as people read it.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// reasonOf is the reason of condition condType, or "".
func reasonOf(conds []metav1.Condition, condType string) string {
	if c := meta.FindStatusCondition(conds, condType); c != nil {
		return c.Reason
	}
	return ""
}
