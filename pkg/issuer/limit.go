package issuer

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Sign-in attempts are limited per user and per source address, before
// any password is checked: a user's bucket holds userBurst attempts and
// refills one every userEvery; a source's holds sourceBurst, one every
// sourceEvery. A limited attempt is answered 429 with Retry-After. (An
// attacker can so slow a user's own sign-ins; that is the price of
// slowing the guessing of their password.) Refreshes and revocations are
// limited per source address too, in a bucket of their own of the same
// size (renewalKey).
const (
	userBurst   = 5
	userEvery   = 12 * time.Second
	sourceBurst = 20
	sourceEvery = time.Second
	// limitersKept bounds the buckets kept; idle ones are dropped first.
	limitersKept = 10000
)

// limiter holds the token buckets of users and sources. Each replica of
// ichor-auth has its own: n replicas allow n times the attempts.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	pruned  time.Time
}

type bucket struct {
	*rate.Limiter
	used time.Time
}

func newLimiter() *limiter { return &limiter{buckets: map[string]*bucket{}} }

// Keys of the buckets: one namespace per kind.
func userKey(name string) string { return "user/" + name }
func sourceKey(addr string) string {
	// An IPv6 host usually has a /64 to itself: count the /64.
	if ip, err := netip.ParseAddr(addr); err == nil && ip.Is6() && !ip.Is4In6() {
		if p, err := ip.Prefix(64); err == nil {
			return "source/" + p.String()
		}
	}
	return "source/" + addr
}

// renewalKey is a source's bucket of refreshes and revocations, apart
// from its sign-ins and with the same limits.
func renewalKey(addr string) string { return "renewal/" + sourceKey(addr) }
func isUserKey(key string) bool     { return len(key) > 5 && key[:5] == "user/" }
func limitOf(key string) (rate.Limit, int) {
	if isUserKey(key) {
		return rate.Every(userEvery), userBurst
	}
	return rate.Every(sourceEvery), sourceBurst
}

// take takes one attempt from every bucket of keys at now, or from none:
// it returns 0 when the attempt may go ahead, or how long to wait.
func (l *limiter) take(now time.Time, keys ...string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A bucket idle for longer than it takes to refill is full: drop it,
	// looking at most once a minute.
	if len(l.buckets) > limitersKept && now.Sub(l.pruned) > time.Minute {
		l.pruned = now
		for k, b := range l.buckets {
			if now.Sub(b.used) > sourceBurst*sourceEvery+userBurst*userEvery {
				delete(l.buckets, k)
			}
		}
	}
	var wait time.Duration
	var reserved []*rate.Reservation
	for _, k := range keys {
		b := l.buckets[k]
		if b == nil {
			every, burst := limitOf(k)
			b = &bucket{Limiter: rate.NewLimiter(every, burst)}
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
