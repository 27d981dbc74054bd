package issuer

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := newLimiter()
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for i := range userBurst {
		if wait := l.Take(now, userKey("dana"), sourceKey("127.0.0.2")); wait != 0 {
			t.Fatalf("attempt %d limited: %s", i+1, wait)
		}
	}
	wait := l.Take(now, userKey("dana"), sourceKey("127.0.0.2"))
	if wait <= 0 || wait > userEvery {
		t.Fatalf("attempt %d: wait %s", userBurst+1, wait)
	}
	// A limited attempt took nothing from the source's bucket: another user
	// from there still has sourceBurst-userBurst attempts.
	for i := range sourceBurst - userBurst {
		if wait := l.Take(now, userKey("vic"+string(rune('a'+i))), sourceKey("127.0.0.2")); wait != 0 {
			t.Fatalf("source attempt %d limited: %s", userBurst+i+1, wait)
		}
	}
	if wait := l.Take(now, userKey("zed"), sourceKey("127.0.0.2")); wait <= 0 {
		t.Fatal("the source is not limited")
	}
	if wait := l.Take(now.Add(userEvery), userKey("dana"), sourceKey("127.0.0.3")); wait != 0 {
		t.Fatalf("after a refill, limited: %s", wait)
	}
}

// TestSourceKey: an IPv6 host counts by its /64; IPv4 by its address.
func TestSourceKey(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2":            "source/127.0.0.2",
		"2001:db8:1:2:aaaa::1": "source/2001:db8:1:2::/64",
		"2001:db8:1:2:bbbb::9": "source/2001:db8:1:2::/64",
		"::ffff:10.0.0.1":      "source/::ffff:10.0.0.1",
		"not an address":       "source/not an address",
	} {
		if got := sourceKey(addr); got != want {
			t.Errorf("sourceKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
