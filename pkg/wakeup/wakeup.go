// Package wakeup brings a reconciler back to an object at a time read on a
// clock.
//
// controller-runtime's RequeueAfter always waits on the wall clock, so a
// reconciler that acts at a time of day (a backup schedule) could only be
// tested by waiting for that time. A Source waits on the clock it is given
// instead: the wall clock in production, a fake clock that a test moves.
package wakeup

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Source is a controller source that delivers the requests it was asked to
// deliver at their times. The zero value is not usable; use New.
type Source struct {
	clock clock.WithDelayedExecution
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]

	mu      sync.Mutex
	pending map[reconcile.Request]wake
}

type wake struct {
	at    time.Time
	timer clock.Timer
}

// New returns a Source on c; nil is the wall clock.
func New(c clock.WithDelayedExecution) *Source {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Source{clock: c, pending: map[reconcile.Request]wake{}}
}

// Source is what the controller watches.
func (s *Source) Source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if !s.queue.CompareAndSwap(nil, &q) {
			return errors.New("wakeup: the source is watched by two controllers")
		}
		return nil
	})
}

// At asks for req to be reconciled at t. A request waits for one time at
// most: the earlier of the one it waits for and t, so a reconcile that asks
// again after each pass never piles up timers.
func (s *Source) At(req reconcile.Request, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[req]; ok {
		if !p.at.After(t) && p.at.After(s.clock.Now()) {
			return
		}
		p.timer.Stop()
	}
	// The timer's function runs under a fake clock's lock: it must not take
	// s.mu, which At holds while it calls the clock.
	s.pending[req] = wake{at: t, timer: s.clock.AfterFunc(t.Sub(s.clock.Now()), func() {
		if q := s.queue.Load(); q != nil {
			(*q).Add(req)
		}
	})}
}

// Forget drops what req waits for: its object is gone.
func (s *Source) Forget(req reconcile.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[req]; ok {
		p.timer.Stop()
		delete(s.pending, req)
	}
}
