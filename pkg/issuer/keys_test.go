package issuer

import (
	"testing"
	"time"
)

// TestKeyRotation: a new key is published Lead before it signs; the old one
// signs until then and stays published until its last token expired.
func TestKeyRotation(t *testing.T) {
	p := rotationPolicy{Period: time.Hour, Lead: 10 * time.Minute, TokenLifetime: 5 * time.Minute}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	var s keySet
	if changed, err := s.rotate(t0, p); err != nil || !changed || len(s.Keys) != 1 {
		t.Fatalf("first rotate: changed %v, %v, %d keys", changed, err, len(s.Keys))
	}
	first := s.Keys[0]
	if s.signing(t0) != first {
		t.Fatal("the first key does not sign at once")
	}
	if changed, _ := s.rotate(t0.Add(59*time.Minute), p); changed {
		t.Fatal("rotated before the period")
	}
	t1 := t0.Add(time.Hour)
	if changed, _ := s.rotate(t1, p); !changed || len(s.Keys) != 2 {
		t.Fatalf("no new key after the period: %d keys", len(s.Keys))
	}
	second := s.Keys[1]
	if s.signing(t1) != first || s.signing(t1.Add(p.Lead-time.Second)) != first {
		t.Error("the new key signs before its lead time")
	}
	if s.signing(t1.Add(p.Lead)) != second {
		t.Error("the new key does not sign after its lead time")
	}
	if len(s.publicKeys().Keys) != 2 {
		t.Error("both keys are not published")
	}
	// The first key signed until t1+Lead; its tokens live TokenLifetime more.
	lastExpiry := t1.Add(p.Lead + p.TokenLifetime)
	if changed, _ := s.rotate(lastExpiry, p); changed || len(s.Keys) != 2 {
		t.Error("the old key was dropped while a token it signed may be valid")
	}
	if changed, _ := s.rotate(lastExpiry.Add(clockSkew+time.Second), p); !changed || len(s.Keys) != 1 || s.Keys[0] != second {
		t.Errorf("the old key was kept after its last token expired: %d keys", len(s.Keys))
	}

	// Stored and read back, the set is the same.
	data, err := s.marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := parseKeySet(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Keys) != 1 || back.Keys[0].ID != second.ID || !back.Keys[0].private.Equal(second.private) {
		t.Errorf("read back: %+v", back.Keys)
	}
	if _, err := parseKeySet([]byte(`{"keys":[{"kid":"x","pkcs8":"AAAA"}]}`)); err == nil {
		t.Error("a key set with a broken key parses")
	}
}
