// Package ratelimit keeps token buckets by key, in memory: the sign-in
// limits of ichor-auth (per user, per source address) and of ichor-ui (per
// browser address), each under its own policy.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Policy gives the bucket of key: one token every every, holding burst.
type Policy func(key string) (every time.Duration, burst int)

// kept bounds the buckets kept; idle ones are dropped first.
const kept = 10000

// Limiter holds the buckets. Each process has its own: n replicas allow n
// times the attempts.
type Limiter struct {
	policy Policy
	// idle is how long a bucket goes unused before it is full again, and
	// may be dropped: the longest burst × every of the policy.
	idle    time.Duration
	mu      sync.Mutex
	buckets map[string]*bucket
	pruned  time.Time
}

type bucket struct {
	*rate.Limiter
	used time.Time
}

// New returns a Limiter whose buckets refill within idle.
func New(policy Policy, idle time.Duration) *Limiter {
	return &Limiter{policy: policy, idle: idle, buckets: map[string]*bucket{}}
}

// Take takes one attempt from every bucket of keys at now, or from none:
// it returns 0 when the attempt may go ahead, or how long to wait.
func (l *Limiter) Take(now time.Time, keys ...string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A bucket idle for longer than it takes to refill is full: drop it,
	// looking at most once a minute.
	if len(l.buckets) > kept && now.Sub(l.pruned) > time.Minute {
		l.pruned = now
		for k, b := range l.buckets {
			if now.Sub(b.used) > l.idle {
				delete(l.buckets, k)
			}
		}
	}
	var wait time.Duration
	var reserved []*rate.Reservation
	for _, k := range keys {
		b := l.buckets[k]
		if b == nil {
			every, burst := l.policy(k)
			b = &bucket{Limiter: rate.NewLimiter(rate.Every(every), burst)}
			l.buckets[k] = b
		}
		b.used = now
		r := b.ReserveN(now, 1)
		reserved = append(reserved, r)
		wait = max(wait, r.DelayFrom(now))
	}
	if wait > 0 {
		for _, r := range reserved {
			r.CancelAt(now)
		}
	}
	return wait
}
