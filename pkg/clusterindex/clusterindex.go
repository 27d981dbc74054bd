// Package clusterindex is how reconcilers find the objects of one
// TalosCluster: TalosMachines, TalosConfigPatches and TalosBackups are indexed by the
// cluster they name, and the handlers here map a change of any of the three
// kinds to the objects of its cluster that must look again.
package clusterindex

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Field is the index of TalosMachines, TalosConfigPatches and TalosBackups by spec.clusterName.
const Field = "spec.clusterName"

// Indexed are new objects of each kind indexed by Field.
func Indexed() []client.Object {
	return []client.Object{&v1alpha1.TalosMachine{}, &v1alpha1.TalosConfigPatch{}, &v1alpha1.TalosBackup{}}
}

// Register adds the indexes to mgr's cache; call it once, before the reconcilers.
func Register(ctx context.Context, mgr manager.Manager) error {
	for _, obj := range Indexed() {
		if err := mgr.GetFieldIndexer().IndexField(ctx, obj, Field, func(o client.Object) []string {
			return []string{ClusterOf(o)}
		}); err != nil {
			return fmt.Errorf("index %T by cluster: %w", obj, err)
		}
	}
	return nil
}

// ClusterOf is the name of the cluster o is or belongs to ("" for none).
func ClusterOf(o client.Object) string {
	switch o := o.(type) {
	case *v1alpha1.TalosCluster:
		return o.Name
	case *v1alpha1.TalosMachine:
		return o.Spec.ClusterName
	case *v1alpha1.TalosConfigPatch:
		return o.Spec.ClusterName
	case *v1alpha1.TalosBackup:
		return o.Spec.ClusterName
	}
	return ""
}

// Member is true for a machine that works for its cluster: approved, and not
// being deleted. Counts, rollouts, patch status and the kubelet serving
// approver all consider these machines only.
func Member(m *v1alpha1.TalosMachine) bool {
	a := m.Status.Approval
	return a != nil && a.Decision == v1alpha1.ApprovalApproved && m.DeletionTimestamp.IsZero()
}

// InCluster lists the options that select the objects of cluster in namespace.
func InCluster(namespace, cluster string) []client.ListOption {
	return []client.ListOption{client.InNamespace(namespace), client.MatchingFields{Field: cluster}}
}

// EnqueueCluster maps a change to the TalosCluster it belongs to.
func EnqueueCluster() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := ClusterOf(o); name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	})
}

// EnqueueMachines maps a change to every TalosMachine of its cluster.
func EnqueueMachines(c client.Reader) handler.EventHandler {
	return enqueueMembers(c, func() client.ObjectList { return &v1alpha1.TalosMachineList{} })
}

// EnqueuePatches maps a change to every TalosConfigPatch of its cluster.
func EnqueuePatches(c client.Reader) handler.EventHandler {
	return enqueueMembers(c, func() client.ObjectList { return &v1alpha1.TalosConfigPatchList{} })
}

func enqueueMembers(c client.Reader, newList func() client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		cluster := ClusterOf(o)
		if cluster == "" {
			return nil
		}
		list := newList()
		if err := c.List(ctx, list, InCluster(o.GetNamespace(), cluster)...); err != nil {
			log.FromContext(ctx).Error(err, "List the objects of a cluster", "cluster", cluster, "kind", fmt.Sprintf("%T", list))
			return nil
		}
		var reqs []reconcile.Request
		for _, item := range itemsOf(list) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(item)})
		}
		return reqs
	})
}

func itemsOf(list client.ObjectList) []client.Object {
	objs, _ := meta.ExtractList(list) // the lists here are typed; ExtractList cannot fail on them
	items := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if co, ok := o.(client.Object); ok {
			items = append(items, co)
		}
	}
	return items
}
