// Package events records Ichor's Events, for ichor-controller's reconcilers
// and ichor-apiserver's registry alike: each with a reason of the table in
// pkg/apis/ichor/v1alpha1 (events.go), which gives its type. Nothing else
// in Ichor calls a recorder (TestRecordsOnlyHere); unit tests record into
// eventstest, which fails a test that records a reason the table lacks.
package events

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientevents "k8s.io/client-go/tools/events"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// EventRecorder is the recorder both sides hold: controller-runtime's
// manager gives ichor-controller's (reporter v1alpha1.ReporterController),
// an events.k8s.io broadcaster ichor-apiserver's (v1alpha1.ReporterAPIServer).
type EventRecorder = clientevents.EventRecorder

// Record records an Event of reason about regarding, with related (nil for
// none), the action taken and the note formatted from format and args. The
// type is the table's for reason; a reason not in the table, which only a
// dynamic one can be, is recorded as a Warning. A nil rec records nothing.
func Record(rec EventRecorder, regarding, related runtime.Object, reason v1alpha1.EventReason, action, format string, args ...any) {
	if rec == nil {
		return
	}
	eventType := reason.Type()
	if eventType == "" {
		eventType = corev1.EventTypeWarning
	}
	rec.Eventf(regarding, related, eventType, string(reason), action, "%s", fmt.Sprintf(format, args...))
}
