package issuer

import (
	"context"
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
	"sync"
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

// rereadEvery bounds how often a replica reads the sessions Secret for
// tokens its copy does not know: a flood of made-up tokens costs it one
// read a second at most.
const rereadEvery = time.Second

// sessionsCopy is a replica's copy of the sessions Secret, so that a
// refresh or revoke with a token that renews no session costs no read. The
// issuer is the Secret's only writer, but every replica of it writes, so
// the copy is a filter and never the decision: a token it knows goes on to
// a fresh read and a write under the Secret's resourceVersion
// (Issuer.changeSessions); one it does not know is refused, after one read
// of the Secret if the copy is rereadEvery old, since another replica may
// have started or renewed that session since.
type sessionsCopy struct {
	file *secretFile
	now  func() time.Time

	reading sync.Mutex // one read of the Secret at a time
	mu      sync.Mutex
	s       sessions
	at      time.Time // when the read that s reflects began; zero: never read
}

// known returns the session token renews (the copy's, which the caller
// must check again against the Secret before it changes it), or nil.
func (c *sessionsCopy) known(ctx context.Context, token string) (*session, error) {
	id, hash, ok := splitRefreshToken(token)
	if !ok {
		return nil, nil
	}
	if sess, stale := c.lookup(id, hash); sess != nil || !stale {
		return sess, nil
	}
	c.reading.Lock()
	defer c.reading.Unlock()
	// A request that waited here finds what the one before it read.
	if sess, stale := c.lookup(id, hash); sess != nil || !stale {
		return sess, nil
	}
	at := c.now()
	data, err := c.file.read(ctx)
	if err != nil {
		return nil, err
	}
	s, err := parseSessions(data)
	if err != nil {
		return nil, err
	}
	c.store(s, at)
	sess, _ := c.lookup(id, hash)
	return sess, nil
}

// lookup finds the session of id whose current or previous token hashes to
// hash. stale says the copy is old enough to be read again: a session it
// lacks may exist. A session the copy shows expired stays so (a session's
// end never moves), and so does a token that is neither of its two.
func (c *sessionsCopy) lookup(id string, hash []byte) (_ *session, stale bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	sess := c.s[id]
	switch {
	case sess == nil:
		return nil, c.at.IsZero() || now.Sub(c.at) >= rereadEvery
	case !now.Before(sess.Expires):
		return nil, false
	case subtle.ConstantTimeCompare(hash, sess.Current) == 1 || subtle.ConstantTimeCompare(hash, sess.Previous) == 1:
		cp := *sess
		return &cp, false
	}
	// Another replica may have renewed it since: its new token is not here.
	return nil, c.at.IsZero() || now.Sub(c.at) >= rereadEvery
}

// store replaces the copy with s, read (and maybe written) from a read
// that began at; an older read than the copy's is dropped.
func (c *sessionsCopy) store(s sessions, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.Before(c.at) {
		return
	}
	c.s, c.at = s, at
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
