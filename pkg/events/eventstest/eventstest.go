// Package eventstest is the recorder of unit tests: client-go's fake
// recorder, whose Events channel reads "<type> <reason> <message>", that
// also fails the test when a reason not in v1alpha1's table is recorded, or
// one of another type than the table's, so that a reason computed at run
// time (a condition's) is checked too.
package eventstest

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientevents "k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Recorder records into its Events channel, checking every reason.
type Recorder struct {
	*clientevents.FakeRecorder
	t testing.TB
}

var _ clientevents.EventRecorderLogger = &Recorder{}

// New returns a recorder for t whose Events channel holds size Events.
func New(t testing.TB, size int) *Recorder {
	return &Recorder{FakeRecorder: clientevents.NewFakeRecorder(size), t: t}
}

// Eventf checks the reason and the type against the table, and records.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	r.t.Helper()
	switch want := v1alpha1.EventReason(reason).Type(); {
	case want == "":
		r.t.Errorf("recorded Event reason %q is not in v1alpha1's table (pkg/apis/ichor/v1alpha1/events.go)", reason)
	case want != eventType:
		r.t.Errorf("recorded Event reason %q as %s; the table says %s", reason, eventType, want)
	}
	if action == "" {
		r.t.Errorf("recorded Event reason %q with no action", reason)
	}
	r.FakeRecorder.Eventf(regarding, related, eventType, reason, action, note, args...)
}

// WithLogger returns r: the logger is not used.
func (r *Recorder) WithLogger(klog.Logger) clientevents.EventRecorderLogger { return r }
