package machineconfig

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// approvalChanged passes updates that change a machine's approval decision.
func approvalChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status.Approval, n.Status.Approval)
		},
	}
}

// kubernetesVersionsChanged passes updates that change the versions a
// kubernetes-upgrade set for a machine's components: its config follows.
func kubernetesVersionsChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status.Kubernetes, n.Status.Kubernetes)
		},
	}
}

// kubeletVerificationChanged passes a cluster whose KubeletServingVerified
// latch changed: control planes render differently with it.
func kubeletVerificationChanged() predicate.Funcs {
	verified := func(o client.Object) bool {
		c, ok := o.(*v1alpha1.TalosCluster)
		return ok && meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ClusterConditionKubeletServingVerified)
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool { return verified(e.ObjectOld) != verified(e.ObjectNew) },
	}
}

// rotationMoved passes a cluster whose status moved what its machines'
// configs render from: a Talos API CA rotation entered a phase, or the
// disk-encryption key slots changed.
func rotationMoved() predicate.Funcs {
	phase := func(o client.Object) v1alpha1.CARotationPhase {
		if c, ok := o.(*v1alpha1.TalosCluster); ok && c.Status.CARotation != nil {
			return c.Status.CARotation.Phase
		}
		return ""
	}
	slots := func(o client.Object) []int {
		if c, ok := o.(*v1alpha1.TalosCluster); ok {
			return render.DiskKeySlots(c)
		}
		return nil
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return phase(e.ObjectOld) != phase(e.ObjectNew) || !slices.Equal(slots(e.ObjectOld), slots(e.ObjectNew))
		},
	}
}

// imageChanged passes a cluster whose installer changed (status.image):
// the installation's image factory changed, which every config names.
func imageChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosCluster)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status.Image, n.Status.Image)
		},
	}
}

// disruptionReleased passes a cluster whose disruption budget was given
// back: the machines waiting for it try again.
func disruptionReleased() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosCluster)
			return ok1 && ok2 && o.Status.Disruption != nil && n.Status.Disruption == nil
		},
	}
}

// deletionStarted passes the update that marks a machine for deletion.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}
