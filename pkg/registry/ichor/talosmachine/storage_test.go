package talosmachine

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestApprovalResetsEveryOtherStatusField keeps the approval endpoint's reset fields in step with the
// status type: server-side apply through /approval must own status.approval and nothing else.
func TestApprovalResetsEveryOtherStatusField(t *testing.T) {
	reset := fieldpath.NewSet(approval.ResetFields...)
	if !reset.Has(fieldpath.MakePathOrDie("spec")) {
		t.Error("the approval endpoint does not reset spec")
	}
	status := reflect.TypeOf(v1alpha1.TalosMachineStatus{})
	for i := range status.NumField() {
		name, _, _ := strings.Cut(status.Field(i).Tag.Get("json"), ",")
		owned := name == "approval"
		if got := reset.Has(fieldpath.MakePathOrDie("status", name)); got == owned {
			t.Errorf("status.%s: reset by the approval endpoint = %v, want %v", name, got, !owned)
		}
	}
}
