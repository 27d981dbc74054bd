package issuer

import (
	"net/netip"
	"time"

	"ichor.dev/ichor/pkg/ratelimit"
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
)

// newLimiter returns the buckets of users, sources and renewals.
func newLimiter() *ratelimit.Limiter {
	return ratelimit.New(limitOf, sourceBurst*sourceEvery+userBurst*userEvery)
}

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
func limitOf(key string) (time.Duration, int) {
	if isUserKey(key) {
		return userEvery, userBurst
	}
	return sourceEvery, sourceBurst
}
