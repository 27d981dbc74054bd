package wakeup

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
}

// started returns a Source on a fake clock, watched through a real queue.
func started(t *testing.T) (*Source, *clocktesting.FakeClock, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC))
	s := New(clock)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := s.Source().Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	return s, clock, q
}

func queued(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var names []string
	for q.Len() > 0 {
		req, _ := q.Get()
		names = append(names, req.Name)
		q.Done(req)
	}
	return names
}

func TestWakesAtTheClocksTimeNotBefore(t *testing.T) {
	s, clock, q := started(t)
	s.At(request("a"), clock.Now().Add(time.Minute))
	clock.Step(59 * time.Second)
	if got := queued(q); len(got) != 0 {
		t.Fatalf("woke %v a second early", got)
	}
	clock.Step(time.Second)
	if got := queued(q); len(got) != 1 || got[0] != "a" {
		t.Fatalf("at the minute: %v", got)
	}
	clock.Step(time.Hour)
	if got := queued(q); len(got) != 0 {
		t.Fatalf("woke again without being asked: %v", got)
	}
}

func TestARequestWaitsForItsEarliestTimeOnce(t *testing.T) {
	s, clock, q := started(t)
	now := clock.Now()
	s.At(request("a"), now.Add(time.Hour))
	s.At(request("a"), now.Add(time.Minute)) // earlier: replaces
	s.At(request("a"), now.Add(2*time.Hour)) // later: the minute stands
	clock.Step(time.Minute)
	if got := queued(q); len(got) != 1 {
		t.Fatalf("at the minute: %v", got)
	}
	clock.Step(3 * time.Hour)
	if got := queued(q); len(got) != 0 {
		t.Fatalf("the replaced times woke it too: %v", got)
	}
	// After it woke, a later time is waited for again.
	s.At(request("a"), clock.Now().Add(time.Minute))
	clock.Step(time.Minute)
	if got := queued(q); len(got) != 1 {
		t.Fatalf("asked again after waking: %v", got)
	}
}

func TestForgottenRequestsDoNotWake(t *testing.T) {
	s, clock, q := started(t)
	s.At(request("gone"), clock.Now().Add(time.Minute))
	s.At(request("kept"), clock.Now().Add(time.Minute))
	s.Forget(request("gone"))
	clock.Step(time.Minute)
	if got := queued(q); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("woke %v", got)
	}
	if clock.HasWaiters() {
		t.Fatal("a timer is left on the clock")
	}
}

func TestATimeAlreadyPastWakesAtOnce(t *testing.T) {
	s, clock, q := started(t)
	s.At(request("late"), clock.Now().Add(-time.Second))
	clock.Step(0)
	if got := queued(q); len(got) != 1 {
		t.Fatalf("a past time: %v", got)
	}
}

func TestOneSourceOneController(t *testing.T) {
	s, _, _ := started(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := s.Source().Start(context.Background(), q); err == nil {
		t.Fatal("a second controller watched the source")
	}
}
