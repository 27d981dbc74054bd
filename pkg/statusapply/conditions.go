// Package statusapply holds what the controllers' server-side applies of
// status share: each writer applies only the condition types it owns, its
// row of the table of status writers (v1alpha1, statuswriters.go).
package statusapply

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// Conditions are the apply configurations of the conditions in conds whose
// type is one of owned, in order.
func Conditions(conds []metav1.Condition, owned ...string) []*metav1ac.ConditionApplyConfiguration {
	var out []*metav1ac.ConditionApplyConfiguration
	for _, c := range conds {
		if slices.Contains(owned, c.Type) {
			out = append(out, metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
				WithMessage(c.Message).WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime))
		}
	}
	return out
}

// Manages reports whether manager has written obj's status: a writer that
// takes over fields another wrote before writes them once, unchanged, to
// own them.
func Manages(obj metav1.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Subresource == "status" {
			return true
		}
	}
	return false
}
