package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// oidcScopes are asked of the provider: the ID token with the email and
// groups kube-apiserver maps, and a refresh token.
var oidcScopes = []string{oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess}

// loginTimeout bounds how long a person has to sign in at the provider.
const loginTimeout = 5 * time.Minute

// oidcClient signs in at an OpenID provider as its public client clientID.
type oidcClient struct {
	issuer, clientID string
	http             *http.Client
	provider         *oidc.Provider
	// warn is what the person should know about the sign-in just made.
	warn string
}

func newOIDCClient(ctx context.Context, issuer, clientID, caPEM string) (*oidcClient, error) {
	_, client, err := httpsClient(issuer, caPEM, "provider")
	if err != nil {
		return nil, err
	}
	c := &oidcClient{issuer: issuer, clientID: clientID, http: client}
	p, err := oidc.NewProvider(c.context(ctx), issuer)
	if err != nil {
		return nil, fmt.Errorf("cannot read the OpenID provider at %s: %w", issuer, err)
	}
	e := p.Endpoint()
	for _, endpoint := range []string{e.AuthURL, e.TokenURL, e.DeviceAuthURL} {
		if eu, err := url.Parse(endpoint); endpoint != "" && (err != nil || eu.Scheme != "https") {
			return nil, fmt.Errorf("the provider's discovery document names endpoint %q, not an https URL", endpoint)
		}
	}
	c.provider = p
	return c, nil
}

func (c *oidcClient) context(ctx context.Context) context.Context {
	return oidc.ClientContext(context.WithValue(ctx, oauth2.HTTPClient, c.http), c.http)
}

func (c *oidcClient) config(redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: c.clientID, Endpoint: c.provider.Endpoint(), Scopes: oidcScopes, RedirectURL: redirect}
}

// kept verifies the ID token of tok (with nonce, when not empty) and
// returns the sign-in to keep and the email it names.
func (c *oidcClient) kept(ctx context.Context, tok *oauth2.Token, nonce string) (*signIn, string, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, "", errors.New("the provider's answer holds no ID token")
	}
	id, err := c.provider.Verifier(&oidc.Config{ClientID: c.clientID}).Verify(c.context(ctx), raw)
	if err != nil {
		return nil, "", fmt.Errorf("the provider's ID token: %w", err)
	}
	if nonce != "" && id.Nonce != nonce {
		return nil, "", errors.New("the provider's ID token answers another sign-in (its nonce differs)")
	}
	var claims struct {
		Email         string `json:"email"`
		EmailVerified *bool  `json:"email_verified"`
	}
	if err := id.Claims(&claims); err != nil {
		return nil, "", fmt.Errorf("the provider's ID token: %w", err)
	}
	switch {
	case claims.Email == "":
		return nil, "", errors.New("the provider's ID token names no email (the email scope): kube-apiserver knows people by it")
	case claims.EmailVerified == nil || !*claims.EmailVerified:
		c.warn = fmt.Sprintf("the provider has not verified %s: kube-apiserver refuses such tokens", claims.Email)
	}
	if tok.RefreshToken == "" {
		return nil, "", errors.New("the provider gave no refresh token (the offline_access scope)")
	}
	return &signIn{Issuer: c.issuer, ClientID: c.clientID, Username: claims.Email, Subject: id.Subject,
		IDToken: raw, Expiry: id.Expiry, RefreshToken: tok.RefreshToken}, claims.Email, nil
}

// browserSignIn runs the authorization-code flow with PKCE: the person
// signs in at the provider in a browser, which brings the code back to a
// listener on loopback.
func (c *oidcClient) browserSignIn(ctx context.Context, o *Options, openBrowser bool) (*signIn, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	defer ln.Close()
	conf := c.config(fmt.Sprintf("http://%s/callback", ln.Addr()))
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce))

	type result struct {
		code string
		err  error
	}
	results := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			http.Error(w, "This answer is for another sign-in.", http.StatusBadRequest)
			return
		case q.Get("error") != "":
			res.err = fmt.Errorf("the provider refused the sign-in: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = errors.New("the provider sent no code")
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		msg := "Authorization received: the sign-in finishes in your terminal. You can close this window."
		if res.err != nil {
			msg = "The sign-in failed: " + res.err.Error()
		}
		_, _ = io.WriteString(w, "<!doctype html><title>ichor login</title><p>"+html.EscapeString(msg)+"</p>")
		select {
		case results <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(o.ErrOut, "Sign in at your OpenID provider; open this URL in a browser:\n\n  %s\n\n", authURL)
	if openBrowser {
		if err := startBrowser(authURL); err != nil {
			fmt.Fprintf(o.ErrOut, "(no browser opened: %v)\n", err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	var res result
	select {
	case res = <-results:
	case <-wait.Done():
		return nil, "", fmt.Errorf("no sign-in within %s", loginTimeout)
	}
	if res.err != nil {
		return nil, "", res.err
	}
	tok, err := conf.Exchange(c.context(ctx), res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, "", providerError(err)
	}
	return c.kept(ctx, tok, nonce)
}

// deviceSignIn runs the device flow, for a shell without a browser: the
// person opens the provider's page anywhere and enters the code shown.
func (c *oidcClient) deviceSignIn(ctx context.Context, o *Options) (*signIn, string, error) {
	conf := c.config("")
	if conf.Endpoint.DeviceAuthURL == "" {
		return nil, "", fmt.Errorf("the OpenID provider at %s offers no device flow; sign in without --device", c.issuer)
	}
	auth, err := conf.DeviceAuth(c.context(ctx))
	if err != nil {
		return nil, "", providerError(err)
	}
	fmt.Fprintf(o.ErrOut, "Sign in at your OpenID provider: open %s and enter the code\n\n  %s\n\n", auth.VerificationURI, auth.UserCode)
	if auth.VerificationURIComplete != "" {
		fmt.Fprintf(o.ErrOut, "(or open %s)\n", auth.VerificationURIComplete)
	}
	wait, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	tok, err := conf.DeviceAccessToken(c.context(wait), auth)
	if err != nil {
		return nil, "", providerError(err)
	}
	return c.kept(ctx, tok, "")
}

// renew renews s with its refresh token.
func (c *oidcClient) renew(ctx context.Context, s *signIn) (*signIn, error) {
	tok, err := c.config("").TokenSource(c.context(ctx), &oauth2.Token{RefreshToken: s.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return nil, providerError(err)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = s.RefreshToken
	}
	renewed, _, err := c.kept(ctx, tok, "")
	switch {
	case err != nil:
		// The provider may have rotated the refresh token already: the
		// sign-in cannot go on.
		return nil, &sessionEndedError{why: "the provider's renewal: " + err.Error()}
	case renewed.Subject != s.Subject:
		return nil, &sessionEndedError{why: "the provider's renewal names someone else"}
	}
	return renewed, nil
}

// providerError says what a provider's refusal means; an invalid_grant ends
// the sign-in.
func providerError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
		return &sessionEndedError{why: "the provider: " + re.ErrorDescription}
	}
	if errors.As(err, &re) && re.ErrorDescription != "" {
		return fmt.Errorf("the provider refused: %s (%s)", re.ErrorDescription, re.ErrorCode)
	}
	return err
}

func randomString() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// startBrowser opens url in the person's browser.
func startBrowser(url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	cmd := exec.Command(name, url)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
