// Package predicates holds the watch filters reconcilers share: which
// updates of an object they watch without owning are worth a reconcile.
// Several reconcilers watch every TalosMachine of a cluster to look at the
// cluster again; other writers' updates that change nothing they read need
// not wake them.
package predicates

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// NotOnlyServingCertificateRecorded drops the updates of a TalosMachine
// that change nothing but the kubelet serving certificate the approver
// (pkg/controller/kubeletserving) records on it, and the metadata every
// write changes. When certificates are issued, every machine of a cluster
// is written at once; a cluster-level reconcile that watches machines and
// does not read the record need not run for each.
var NotOnlyServingCertificateRecorded = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	oldM, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
	newM, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutRecord(*oldM), withoutRecord(*newM))
}}

// withoutRecord is m, by value, without the record and the metadata every
// write changes; what it points to is shared with m and never changed.
func withoutRecord(m v1alpha1.TalosMachine) v1alpha1.TalosMachine {
	m.ResourceVersion, m.ManagedFields = "", nil
	m.Status.KubeletServingCertificate = nil
	return m
}
