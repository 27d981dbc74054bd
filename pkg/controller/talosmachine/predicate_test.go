package talosmachine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestRelevantChange(t *testing.T) {
	base := &v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1, ResourceVersion: "1"}}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.TalosMachine)
		want   bool
	}{
		{"own status write", func(m *v1alpha1.TalosMachine) { m.Status.Phase = v1alpha1.MachinePhasePendingApproval }, false},
		{"spec change", func(m *v1alpha1.TalosMachine) { m.Generation = 2 }, true},
		{"deletion", func(m *v1alpha1.TalosMachine) { m.DeletionTimestamp = &now }, true},
		{"approval", func(m *v1alpha1.TalosMachine) {
			m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "ann", At: now}
		}, true},
	} {
		updated := base.DeepCopy()
		updated.ResourceVersion = "2"
		tc.mutate(updated)
		if got := relevantChange().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: updated}); got != tc.want {
			t.Errorf("%s: passed %v, want %v", tc.name, got, tc.want)
		}
	}
	if !relevantChange().Create(event.CreateEvent{Object: base}) {
		t.Error("a new machine is not reconciled")
	}
}
