package talosmachine

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// relevantChange lets through the updates intake acts on: a new spec
// (generation), the start of deletion, and an approval decision. It keeps
// out the reconciler's own status writes, which would otherwise wake it at
// once and defeat its backoff.
func relevantChange() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldM, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
			newM, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
			if !ok1 || !ok2 {
				return true
			}
			return oldM.Generation != newM.Generation ||
				oldM.DeletionTimestamp.IsZero() != newM.DeletionTimestamp.IsZero() ||
				!equality.Semantic.DeepEqual(oldM.Status.Approval, newM.Status.Approval)
		},
	}
}
