package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// OIDCOptions are the OpenID provider people may sign in at, besides
// ichor-auth: the same provider kube-apiserver trusts, through a client
// registered for the console.
type OIDCOptions struct {
	// IssuerURL is the provider's issuer.
	IssuerURL string
	// ClientID is the console's client; kube-apiserver must accept it as an
	// audience.
	ClientID string
	// ClientSecret is the client's secret; empty for a public client (PKCE
	// protects the code either way).
	ClientSecret string
	// Client reaches the provider, trusting its serving CA.
	Client *http.Client
	// Name is what the sign-in page calls the provider.
	Name string
	// RedirectURL is where the provider sends people back: the console's
	// /oidc/callback under the name people reach it by. Empty: the host
	// each request names.
	RedirectURL string
}

// oidcScopes are what the console asks the provider for: an ID token with
// the email and groups kube-apiserver maps, and a refresh token to renew it.
var oidcScopes = []string{oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess}

// oidcCookie carries the state of a sign-in at the provider. SameSite=Lax,
// not Strict: the browser must send it when the provider sends it back,
// a navigation from another site.
const oidcCookie = "__Host-ichor-ui-oidc"

// oidcLoginTimeout bounds a sign-in at the provider.
const oidcLoginTimeout = 10 * time.Minute

// maxPendingLogins bounds the sign-ins started and not finished: starting
// one needs no session, so a flood of them must not grow without end.
const maxPendingLogins = 10000

// errTooManyLogins refuses a sign-in while too many are unfinished.
var errTooManyLogins = errors.New("too many sign-ins are in progress")

// pendingLogin is a sign-in at the provider that has not come back yet.
type pendingLogin struct {
	nonce, verifier string
	expires         time.Time
}

// provider is the OpenID provider, discovered on first use (it may start
// after the console).
type provider struct {
	opts OIDCOptions
	now  func() time.Time

	// discovering is held while the discovery document is read, apart
	// from mu, so that a provider that does not answer holds up no sign-in
	// bookkeeping.
	discovering sync.Mutex
	oidc        *oidc.Provider
	revoke      string
	scopes      []string

	mu       sync.Mutex
	pendings map[string]pendingLogin
}

func newProvider(opts OIDCOptions, now func() time.Time) *provider {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.Name == "" {
		opts.Name = "your OpenID provider"
	}
	return &provider{opts: opts, now: now, pendings: map[string]pendingLogin{}}
}

// context makes go-oidc and oauth2 use the provider's client.
func (p *provider) context(ctx context.Context) context.Context {
	return oidc.ClientContext(context.WithValue(ctx, oauth2.HTTPClient, p.opts.Client), p.opts.Client)
}

// discover reads the provider's discovery document once it answers.
func (p *provider) discover(ctx context.Context) (*oidc.Provider, error) {
	p.discovering.Lock()
	defer p.discovering.Unlock()
	if p.oidc != nil {
		return p.oidc, nil
	}
	d, err := oidc.NewProvider(p.context(ctx), p.opts.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("read the OpenID provider at %s: %w", p.opts.IssuerURL, err)
	}
	e := d.Endpoint()
	for _, endpoint := range []string{e.AuthURL, e.TokenURL} {
		if u, err := url.Parse(endpoint); err != nil || u.Scheme != "https" {
			return nil, fmt.Errorf("the provider's discovery document names endpoint %q, not an https URL", endpoint)
		}
	}
	var extra struct {
		Revocation string   `json:"revocation_endpoint"`
		Scopes     []string `json:"scopes_supported"`
	}
	_ = d.Claims(&extra)
	if u, err := url.Parse(extra.Revocation); err != nil || u.Scheme != "https" {
		extra.Revocation = "" // a refresh token goes nowhere but over TLS
	}
	// Ask only for what the provider says it has (openid always): some
	// refuse a scope they do not know, such as groups.
	scopes := oidcScopes
	if len(extra.Scopes) > 0 {
		scopes = []string{oidc.ScopeOpenID}
		for _, sc := range oidcScopes[1:] {
			if slices.Contains(extra.Scopes, sc) {
				scopes = append(scopes, sc)
			}
		}
	}
	p.oidc, p.revoke, p.scopes = d, extra.Revocation, scopes
	return d, nil
}

func (p *provider) config(d *oidc.Provider, redirect string) *oauth2.Config {
	e := d.Endpoint()
	e.AuthStyle = oauth2.AuthStyleInHeader
	if p.opts.ClientSecret == "" {
		e.AuthStyle = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: p.opts.ClientID, ClientSecret: p.opts.ClientSecret, Endpoint: e, Scopes: p.scopes, RedirectURL: redirect}
}

// remember keeps a started sign-in under its state until it comes back or
// expires; at most maxPendingLogins at once.
func (p *provider) remember(state string, l pendingLogin) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pendings) >= maxPendingLogins {
		p.sweepLocked()
		if len(p.pendings) >= maxPendingLogins {
			return errTooManyLogins
		}
	}
	p.pendings[state] = l
	return nil
}

// sweep forgets the sign-ins that expired.
func (p *provider) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked()
}

func (p *provider) sweepLocked() {
	now := p.now()
	for k, l := range p.pendings {
		if !now.Before(l.expires) {
			delete(p.pendings, k)
		}
	}
}

// take returns the sign-in started under state, once.
func (p *provider) take(state string) (pendingLogin, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.pendings[state]
	delete(p.pendings, state)
	return l, ok && p.now().Before(l.expires)
}

// callbackURL is where the provider sends the browser back: the
// configured URL, or this host's.
func (p *provider) callbackURL(r *http.Request) string {
	if p.opts.RedirectURL != "" {
		return p.opts.RedirectURL
	}
	return "https://" + r.Host + "/oidc/callback"
}

// oidcStart sends the browser to the provider with a fresh state, nonce
// and PKCE verifier; the state also goes into a cookie of this browser, so
// that only the browser that started a sign-in can finish it.
func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request) {
	d, err := s.oidc.discover(r.Context())
	if err != nil {
		klog.InfoS("the OpenID provider cannot be read", "err", err)
		s.renderLogin(w, r, http.StatusBadGateway, "the OpenID provider does not answer; try again, or sign in with an Ichor user")
		return
	}
	state, nonce, verifier := randomToken(), randomToken(), oauth2.GenerateVerifier()
	if err := s.oidc.remember(state, pendingLogin{nonce: nonce, verifier: verifier, expires: s.now().Add(oidcLoginTimeout)}); err != nil {
		s.renderLogin(w, r, http.StatusServiceUnavailable, "too many sign-ins are in progress; try again in a few minutes")
		return
	}
	c := cookie(oidcCookie, state, s.now().Add(oidcLoginTimeout))
	c.SameSite = http.SameSiteLaxMode
	http.SetCookie(w, c)
	target := s.oidc.config(d, s.oidc.callbackURL(r)).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// oidcCallback finishes a sign-in at the provider: the code is exchanged
// with the PKCE verifier, the ID token verified (signature, audience,
// nonce), and kube-apiserver asked who it is, as for an Ichor user.
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	clear := cookie(oidcCookie, "", time.Time{})
	clear.SameSite = http.SameSiteLaxMode
	http.SetCookie(w, clear)
	q := r.URL.Query()
	c, err := r.Cookie(oidcCookie)
	if err != nil || q.Get("state") == "" || c.Value != q.Get("state") {
		s.renderLogin(w, r, http.StatusForbidden, "this sign-in was not started by this browser; start it again")
		return
	}
	pending, ok := s.oidc.take(q.Get("state"))
	if !ok {
		s.renderLogin(w, r, http.StatusForbidden, "this sign-in expired; start it again")
		return
	}
	if e := q.Get("error"); e != "" {
		msg := "the OpenID provider refused the sign-in: " + e
		if d := q.Get("error_description"); d != "" {
			msg += ": " + d
		}
		s.renderLogin(w, r, http.StatusUnauthorized, msg)
		return
	}
	as, err := s.oidcSignIn(r.Context(), r, q.Get("code"), pending)
	if err != nil {
		var refused *errSignIn
		msg := "the sign-in at the OpenID provider could not be finished; try again"
		if errors.As(err, &refused) {
			msg = refused.msg
		} else {
			klog.InfoS("a sign-in at the OpenID provider failed", "err", err)
		}
		s.renderLogin(w, r, http.StatusUnauthorized, msg)
		return
	}
	se := s.sessions.start(as, true, s.now().Add(s.opts.SessionLifetime))
	http.SetCookie(w, cookie(sessionCookie, se.id, se.expires))
	klog.InfoS("signed in", "user", as.who.User, "groups", as.who.Groups, "at", "the OpenID provider")
	// A page, not a redirect: the browser came from another site, and a
	// redirect would still be that site's navigation, without the
	// SameSite=Strict session cookie.
	s.render(w, http.StatusOK, "continue", map[string]any{"To": "/clusters"})
}

// oidcSignIn exchanges a code and asks kube-apiserver who its ID token is.
func (s *Server) oidcSignIn(ctx context.Context, r *http.Request, code string, pending pendingLogin) (signedInAs, error) {
	d, err := s.oidc.discover(ctx)
	if err != nil {
		return signedInAs{}, err
	}
	tok, err := s.oidc.config(d, s.oidc.callbackURL(r)).Exchange(s.oidc.context(ctx), code, oauth2.VerifierOption(pending.verifier))
	if err != nil {
		return signedInAs{}, fmt.Errorf("exchange the code: %w", err)
	}
	return s.oidcIdentity(ctx, d, tok, pending.nonce)
}

// oidcIdentity verifies tok's ID token and asks kube-apiserver who it is.
func (s *Server) oidcIdentity(ctx context.Context, d *oidc.Provider, tok *oauth2.Token, nonce string) (signedInAs, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return signedInAs{}, errors.New("the provider's answer holds no ID token")
	}
	id, err := d.Verifier(&oidc.Config{ClientID: s.oidc.opts.ClientID}).Verify(s.oidc.context(ctx), raw)
	if err != nil {
		return signedInAs{}, fmt.Errorf("the provider's ID token: %w", err)
	}
	if nonce != "" && id.Nonce != nonce {
		return signedInAs{}, errors.New("the provider's ID token is not for this sign-in (nonce)")
	}
	who, err := s.whoIs(ctx, raw)
	var refused *errSignIn
	switch {
	case errors.As(err, &refused):
		return signedInAs{}, err
	case apierrors.IsUnauthorized(err):
		// kube-apiserver tells a client no reason: say where to look.
		return signedInAs{}, &errSignIn{msg: "kube-apiserver did not accept the sign-in: its authentication configuration refuses this account " +
			"(an email the provider has not verified, a claim rule); kube-apiserver's log says which"}
	case err != nil:
		return signedInAs{}, err
	}
	return signedInAs{who: who, token: raw, refresh: tok.RefreshToken, renewAt: s.renewAt(id.Expiry)}, nil
}

// oidcRenew looks at a person signed in at the provider again, with the
// refresh token, as kubectl's exec plugin does. A provider need not send a
// new ID token with a refresh (OpenID Connect Core 12.2), but the console
// has no other credential for the person: without one the session ends,
// and with it the groups it was signed in with.
func (s *Server) oidcRenew(ctx context.Context, se *session) (signedInAs, error) {
	d, err := s.oidc.discover(ctx)
	if err != nil {
		return signedInAs{}, err
	}
	tok, err := s.oidc.config(d, "").TokenSource(s.oidc.context(ctx), &oauth2.Token{RefreshToken: se.refresh}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return signedInAs{}, &errSignIn{msg: "the OpenID provider ended your sign-in"}
		}
		return signedInAs{}, err
	}
	if raw, _ := tok.Extra("id_token").(string); raw == "" {
		return signedInAs{}, &errSignIn{msg: "the OpenID provider renewed your sign-in without a new ID token, which kube-apiserver needs; sign in again"}
	}
	as, err := s.oidcIdentity(ctx, d, tok, "")
	as.refresh = cmp.Or(as.refresh, se.refresh)
	return as, err
}

// oidcRevoke ends the provider's session of a refresh token, best effort:
// the console's session is gone either way.
func (s *Server) oidcRevoke(ctx context.Context, refresh string) {
	if _, err := s.oidc.discover(ctx); err != nil || s.oidc.revoke == "" {
		return
	}
	form := url.Values{"token": {refresh}, "token_type_hint": {"refresh_token"}}
	if s.oidc.opts.ClientSecret == "" {
		form.Set("client_id", s.oidc.opts.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.oidc.revoke, strings.NewReader(form.Encode()))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if s.oidc.opts.ClientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(s.oidc.opts.ClientID), url.QueryEscape(s.oidc.opts.ClientSecret))
	}
	if resp, err := s.oidc.opts.Client.Do(req); err == nil {
		_ = resp.Body.Close()
	}
}
