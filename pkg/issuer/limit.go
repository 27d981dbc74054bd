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
// limited per source address too, in a bucket of their own (renewalKey),
// larger: a refresh token is 256 random bits, not a guessable password,
// and one that renews no session costs no read of the sessions (the
// issuer's copy filters it), but many people behind one address renew
// every token lifetime.
const (
	userBurst    = 5
	userEvery    = 12 * time.Second
	sourceBurst  = 20
	sourceEvery  = time.Second
	renewalBurst = 100
	renewalEvery = 100 * time.Millisecond
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
	switch {
	case isUserKey(key):
		return userEvery, userBurst
	case isRenewalKey(key):
		return renewalEvery, renewalBurst
	}
	return sourceEvery, sourceBurst
}

func isRenewalKey(key string) bool { return len(key) > 8 && key[:8] == "renewal/" }
