package itest

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// APIWatchEventTimeout bounds the wait for one watch event.
const APIWatchEventTimeout = 30 * time.Second

// APINextMachineEvent returns the next event of a TalosMachine watch, failing
// the test on a closed watch, an ERROR event or the deadline.
func APINextMachineEvent(t *testing.T, w watch.Interface) (watch.EventType, *v1alpha1.TalosMachine) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed early")
		}
		if ev.Type == watch.Error {
			t.Fatalf("watch error: %v", ev.Object)
		}
		m, ok := ev.Object.(*v1alpha1.TalosMachine)
		if !ok {
			t.Fatalf("%s event carries %T, want *TalosMachine", ev.Type, ev.Object)
		}
		return ev.Type, m
	case <-time.After(APIWatchEventTimeout):
		t.Fatalf("no watch event within %s", APIWatchEventTimeout)
	}
	return "", nil
}
