package events

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	clientevents "k8s.io/client-go/tools/events"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestRecordTakesTheTablesType: Record gives an Event the type of its
// reason's row, and formats its note; a reason outside the table is a
// Warning; without a recorder nothing happens.
func TestRecordTakesTheTablesType(t *testing.T) {
	rec := clientevents.NewFakeRecorder(10)
	op := &v1alpha1.TalosOperation{}
	Record(rec, op, nil, v1alpha1.EventStepFailed, "Step", "%s: %s", "cp-1", "no 100% answer")
	Record(rec, op, nil, v1alpha1.EventStepSucceeded, "Step", "done")
	Record(rec, op, nil, v1alpha1.EventReason("NotInTheTable"), "Step", "odd")
	Record(nil, op, nil, v1alpha1.EventStepSucceeded, "Step", "nowhere")
	for _, want := range []string{
		corev1.EventTypeWarning + " StepFailed cp-1: no 100% answer",
		corev1.EventTypeNormal + " StepSucceeded done",
		corev1.EventTypeWarning + " NotInTheTable odd",
	} {
		if got := <-rec.Events; got != want {
			t.Errorf("recorded %q; want %q", got, want)
		}
	}
	if len(rec.Events) != 0 {
		t.Errorf("recorded %q too", <-rec.Events)
	}
}
