package issuer

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// session is one sign-in: what its refresh token may renew, and until when.
type session struct {
	User string    `json:"user"`
	UID  types.UID `json:"uid"`
	// Started is when the user signed in with the password; the session
	// ends Expires, whatever its refreshes.
	Started time.Time `json:"started"`
	Expires time.Time `json:"expires"`
	// PasswordChangedAt is the user's status.passwordChangedAt at sign-in:
	// a refresh after the password changed ends the session.
	PasswordChangedAt time.Time `json:"passwordChangedAt"`
	// Current is the SHA-256 of the refresh token that renews it now;
	// Previous, of the one it replaced, presented again only by a thief or
	// a replay (it ends the session).
	Current  []byte `json:"current"`
	Previous []byte `json:"previous,omitempty"`
}

// sessions are every session, by ID.
type sessions map[string]*session

// maxSessionsPerUser bounds what one user's sign-ins keep stored: the
// oldest session ends when a user starts one more.
const maxSessionsPerUser = 20

// refreshToken is "<session ID>.<secret>", both base64url; only the
// secret's hash is stored.
func newRefreshToken(id string) (token string, hash []byte, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", nil, err
	}
	s := base64.RawURLEncoding.EncodeToString(secret)
	h := sha256.Sum256([]byte(s))
	return id + "." + s, h[:], nil
}

// splitRefreshToken returns the session ID and the hash of the secret.
func splitRefreshToken(token string) (id string, hash []byte, ok bool) {
	id, secret, ok := strings.Cut(token, ".")
	if !ok || id == "" || len(secret) != 43 || len(id) != 22 {
		return "", nil, false
	}
	h := sha256.Sum256([]byte(secret))
	return id, h[:], true
}

// start adds a session for user and returns its ID and refresh token.
func (s sessions) start(user string, uid types.UID, passwordChangedAt, now time.Time, lifetime time.Duration) (id, token string, err error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	id = base64.RawURLEncoding.EncodeToString(raw)
	token, hash, err := newRefreshToken(id)
	if err != nil {
		return "", "", err
	}
	s[id] = &session{User: user, UID: uid, PasswordChangedAt: passwordChangedAt, Started: now.UTC(), Expires: now.Add(lifetime).UTC(), Current: hash}
	// Bound what one user keeps: the oldest of theirs ends first.
	var own []string
	for other, sess := range s {
		if sess.User == user {
			own = append(own, other)
		}
	}
	slices.SortFunc(own, func(a, b string) int { return s[a].Started.Compare(s[b].Started) })
	for len(own) > maxSessionsPerUser {
		delete(s, own[0])
		own = own[1:]
	}
	return id, token, nil
}

// Errors of a refresh token, which the token endpoint reports as
// invalid_grant.
var (
	errUnknownSession = errors.New("the session has ended: sign in again")
	errReplayed       = errors.New("the refresh token was already used, so the session has ended: sign in again")
)

// renew checks token and replaces it with a new one: it returns the
// session and the new token, and whether s changed (a renewal, or a
// session ended by a replay or its expiry).
func (s sessions) renew(token string, now time.Time) (_ *session, next string, changed bool, _ error) {
	id, hash, ok := splitRefreshToken(token)
	if !ok {
		return nil, "", false, errUnknownSession
	}
	sess := s[id]
	switch {
	case sess == nil:
		return nil, "", false, errUnknownSession
	case !now.Before(sess.Expires):
		delete(s, id)
		return nil, "", true, errUnknownSession
	case subtle.ConstantTimeCompare(hash, sess.Previous) == 1:
		delete(s, id)
		return nil, "", true, errReplayed
	case subtle.ConstantTimeCompare(hash, sess.Current) != 1:
		return nil, "", false, errUnknownSession
	}
	next, nextHash, err := newRefreshToken(id)
	if err != nil {
		return nil, "", false, err
	}
	sess.Previous, sess.Current = sess.Current, nextHash
	return sess, next, true, nil
}

// end removes the session token renews, if any, and reports whether it
// was there.
func (s sessions) end(token string) bool {
	id, hash, ok := splitRefreshToken(token)
	if !ok || s[id] == nil {
		return false
	}
	sess := s[id]
	if subtle.ConstantTimeCompare(hash, sess.Current) != 1 && subtle.ConstantTimeCompare(hash, sess.Previous) != 1 {
		return false
	}
	delete(s, id)
	return true
}

// prune drops the sessions that have expired.
func (s sessions) prune(now time.Time) {
	maps.DeleteFunc(s, func(_ string, sess *session) bool { return !now.Before(sess.Expires) })
}

// parseSessions reads stored sessions; empty data is none.
func parseSessions(data []byte) (sessions, error) {
	s := sessions{}
	if len(data) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse the sessions: %w", err)
	}
	return s, nil
}
