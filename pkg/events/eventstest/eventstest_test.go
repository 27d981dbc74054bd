package eventstest

import (
	"fmt"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
)

// failures is a testing.TB that keeps what the recorder fails with.
type failures struct {
	testing.TB
	errors []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// TestFailsOnAReasonNotInTheTable: a reason of the table records; one
// outside it, or of another type than the table's, fails the test.
func TestFailsOnAReasonNotInTheTable(t *testing.T) {
	f := &failures{TB: t}
	rec := New(f, 10)
	m := &v1alpha1.TalosMachine{}
	events.Record(rec, m, nil, v1alpha1.EventConfigApplied, "ApplyConfig", "applied")
	if len(f.errors) != 0 {
		t.Fatalf("a reason of the table failed the test: %q", f.errors)
	}
	if got := <-rec.Events; got != "Normal ConfigApplied applied" {
		t.Errorf("recorded %q", got)
	}

	cond := v1alpha1.MachineReasonRenderFailed // a condition's reason, not an Event's
	events.Record(rec, m, nil, v1alpha1.EventReason(cond), "RenderConfig", "failed")
	rec.Eventf(m, nil, "Normal", string(v1alpha1.EventConfigFailed), "RenderConfig", "as Normal")
	rec.Eventf(m, nil, "Warning", string(v1alpha1.EventConfigFailed), "", "no action")
	if len(f.errors) != 3 {
		t.Fatalf("failed with %q; want three failures", f.errors)
	}
	if len(rec.Events) != 3 {
		t.Errorf("recorded %d Events; want the three still recorded", len(rec.Events))
	}
}
