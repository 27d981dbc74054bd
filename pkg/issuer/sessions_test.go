package issuer

import (
	"errors"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := sessions{}
	_, token, err := s.start("dana", "uid-1", time.Time{}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Renewing rotates the token.
	sess, next, _, err := s.renew(token, now.Add(time.Minute))
	if err != nil || sess.User != "dana" || next == token {
		t.Fatalf("renew: %v %v", sess, err)
	}
	// The replaced token, presented again, ends the session.
	if _, _, _, err := s.renew(token, now.Add(2*time.Minute)); !errors.Is(err, errReplayed) {
		t.Fatalf("replay: %v", err)
	}
	if _, _, _, err := s.renew(next, now.Add(2*time.Minute)); !errors.Is(err, errUnknownSession) {
		t.Fatalf("after a replay, the current token renews: %v", err)
	}

	// Ending a session.
	_, token, _ = s.start("dana", "uid-1", time.Time{}, now, time.Hour)
	if !s.end(token) || s.end(token) {
		t.Fatal("end")
	}
	if _, _, _, err := s.renew(token, now); !errors.Is(err, errUnknownSession) {
		t.Fatalf("an ended session renews: %v", err)
	}

	// Expiry, and tokens that are not tokens.
	_, token, _ = s.start("dana", "uid-1", time.Time{}, now, time.Hour)
	if _, _, _, err := s.renew(token, now.Add(time.Hour)); !errors.Is(err, errUnknownSession) {
		t.Fatalf("an expired session renews: %v", err)
	}
	for _, bad := range []string{"", ".", "abc", token + "x", "x" + token} {
		if _, _, _, err := s.renew(bad, now); err == nil {
			t.Errorf("%q renews", bad)
		}
	}

	// One user keeps at most maxSessionsPerUser.
	s = sessions{}
	var first string
	for i := range maxSessionsPerUser + 5 {
		_, tok, _ := s.start("dana", "uid-1", time.Time{}, now.Add(time.Duration(i)*time.Second), time.Hour)
		if i == 0 {
			first = tok
		}
	}
	_, _, _ = s.start("vic", "uid-2", time.Time{}, now, time.Hour)
	if len(s) != maxSessionsPerUser+1 {
		t.Errorf("%d sessions kept", len(s))
	}
	if _, _, _, err := s.renew(first, now.Add(time.Minute)); err == nil {
		t.Error("the oldest session survived the bound")
	}
	s.prune(now.Add(2 * time.Hour))
	if len(s) != 0 {
		t.Errorf("%d sessions after they all expired", len(s))
	}
}
