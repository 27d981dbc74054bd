package ui

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// sessionCookie names the session's cookie. The __Host- prefix makes the
// browser refuse it unless it is Secure, has Path=/ and no Domain: no other
// host can set or read it.
const sessionCookie = "__Host-ichor-ui"

// loginCookie carries the CSRF token of the sign-in form, before there is
// a session.
const loginCookie = "__Host-ichor-ui-login"

// identity is the person a session acts as.
type identity struct {
	// User is the name kube-apiserver authenticated ("ichor:dana").
	User string
	// Groups are the Ichor role groups among the person's groups.
	Groups []string
	// ManagesUsers is whether kube-apiserver lets the person list
	// IchorUsers: the header offers the users page then.
	ManagesUsers bool
}

// session is one sign-in. Only its id leaves the server.
type session struct {
	id   string
	csrf string
	// signedInAs holds the person, their ID token (the credential every
	// request for them carries), the refresh token and when to renew.
	signedInAs
	// viaOIDC says the person signed in at the OpenID provider.
	viaOIDC bool
	// expires is when the session ends whatever happens.
	expires time.Time
	// ended is closed when the session ends (sign-out, expiry): the
	// streams it opened stop.
	ended chan struct{}
}

// sessions are the signed-in sessions, in memory: a restart of ichor-ui
// signs everyone out, which is safe.
type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
	// renewals serialise the renewals of each session.
	renewals map[string]*sync.Mutex
}

func newSessions() *sessions {
	return &sessions{byID: map[string]*session{}, renewals: map[string]*sync.Mutex{}}
}

// lockRenewal holds id's renewal until the returned func is called.
func (s *sessions) lockRenewal(id string) func() {
	s.mu.Lock()
	m := s.renewals[id]
	if m == nil {
		m = &sync.Mutex{}
		s.renewals[id] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// randomToken is 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// start records a new session for who.
func (s *sessions) start(as signedInAs, viaOIDC bool, expires time.Time) *session {
	se := &session{id: randomToken(), signedInAs: as, csrf: randomToken(), viaOIDC: viaOIDC, expires: expires, ended: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[se.id] = se
	return se
}

// get returns the session of r's cookie, nil when there is none or it
// ended.
func (s *sessions) get(r *http.Request, now time.Time) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.byID[c.Value]
	if se == nil {
		return nil
	}
	if !now.Before(se.expires) {
		s.forget(se)
		return nil
	}
	copied := *se
	return &copied
}

// update replaces a session's person and tokens after it was renewed.
func (s *sessions) update(id string, as signedInAs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.byID[id]; se != nil {
		se.signedInAs = as
	}
}

// end forgets a session.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.byID[id]; se != nil {
		s.forget(se)
	}
}

// forget removes a session and stops its streams; s.mu is held.
func (s *sessions) forget(se *session) {
	delete(s.byID, se.id)
	delete(s.renewals, se.id)
	close(se.ended)
}

// sweep forgets the sessions that ended.
func (s *sessions) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.byID {
		if !now.Before(se.expires) {
			s.forget(se)
		}
	}
}

// cookie is the session cookie for id, living until expires (a zero time
// and MaxAge -1 clear it).
func cookie(name, value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}
