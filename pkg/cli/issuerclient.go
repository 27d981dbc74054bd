package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// cliClientID is the OAuth client the ichor CLI is at Ichor's issuer: a
// public client, without a secret.
const cliClientID = ichor.DefaultTokenAudience

// issuerClient talks to Ichor's token issuer (ichor-auth).
type issuerClient struct {
	issuer string
	http   *http.Client
	// token and revoke are the endpoints its discovery document names.
	token, revoke string
}

// newIssuerClient reads issuer's discovery document, over TLS verified
// with caPEM when given (else the system's roots).
func newIssuerClient(ctx context.Context, issuer, caPEM string) (*issuerClient, error) {
	u, client, err := httpsClient(issuer, caPEM, "issuer")
	if err != nil {
		return nil, err
	}
	// A password is never sent on to wherever a redirect points.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &issuerClient{issuer: issuer, http: client}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the issuer at %s: %w", issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the issuer at %s answered %s to its discovery document", issuer, resp.Status)
	}
	var doc struct {
		Issuer     string `json:"issuer"`
		Token      string `json:"token_endpoint"`
		Revocation string `json:"revocation_endpoint"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("the issuer's discovery document: %w", err)
	}
	if doc.Issuer != issuer {
		return nil, fmt.Errorf("the discovery document at %s names issuer %q: give --issuer exactly as the issuer names itself", issuer, doc.Issuer)
	}
	for _, endpoint := range []string{doc.Token, doc.Revocation} {
		if e, err := url.Parse(endpoint); endpoint != "" && (err != nil || e.Scheme != "https" || e.Host != u.Host) {
			return nil, fmt.Errorf("the issuer's discovery document names endpoint %q, not an https URL of %s", endpoint, u.Host)
		}
	}
	c.token, c.revoke = doc.Token, doc.Revocation
	return c, nil
}

// httpsClient checks that issuer is an https URL and returns it with a
// client that verifies it with caPEM when given (else the system's roots);
// what names the issuer in errors.
func httpsClient(issuer, caPEM, what string) (*url.URL, *http.Client, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, nil, fmt.Errorf("issuer %q: an https URL is required", issuer)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, nil, fmt.Errorf("the %s's certificate authority holds no PEM certificate", what)
		}
		tlsConfig.RootCAs = pool
	}
	return u, &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment},
	}, nil
}

func (c *issuerClient) config() *oauth2.Config {
	return &oauth2.Config{ClientID: cliClientID, Endpoint: oauth2.Endpoint{TokenURL: c.token, AuthStyle: oauth2.AuthStyleInParams}}
}

func (c *issuerClient) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, c.http)
}

// signIn signs username in with password.
func (c *issuerClient) signIn(ctx context.Context, username, password string) (*signIn, error) {
	tok, err := c.config().PasswordCredentialsToken(c.context(ctx), username, password)
	if err != nil {
		return nil, issuerError(err)
	}
	return c.kept(username, tok)
}

// renew renews s with its refresh token.
func (c *issuerClient) renew(ctx context.Context, s *signIn) (*signIn, error) {
	tok, err := c.config().TokenSource(c.context(ctx), &oauth2.Token{RefreshToken: s.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return nil, issuerError(err)
	}
	return c.kept(s.Username, tok)
}

// kept is the sign-in to keep from a token response.
func (c *issuerClient) kept(username string, tok *oauth2.Token) (*signIn, error) {
	id, _ := tok.Extra("id_token").(string)
	if id == "" || tok.RefreshToken == "" {
		return nil, errors.New("the issuer's answer holds no id_token or refresh_token")
	}
	return &signIn{Issuer: c.issuer, Username: username, IDToken: id, Expiry: tok.Expiry, RefreshToken: tok.RefreshToken}, nil
}

// end ends the session of refreshToken at the issuer.
func (c *issuerClient) end(ctx context.Context, refreshToken string) error {
	if c.revoke == "" {
		return errors.New("the issuer names no revocation endpoint")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.revoke,
		strings.NewReader(url.Values{"token": {refreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {cliClientID}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the issuer at %s: %w", c.issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the issuer refused to end the session: %s", resp.Status)
	}
	return nil
}

// sessionEndedError is the issuer's refusal to renew a sign-in.
type sessionEndedError struct{ why string }

func (e *sessionEndedError) Error() string { return e.why }

// issuerError says what an issuer's refusal means.
func issuerError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("cannot reach the issuer: %w", err)
	}
	desc := re.ErrorDescription
	if desc == "" {
		desc = re.Response.Status
	}
	switch re.ErrorCode {
	case "invalid_grant":
		return &sessionEndedError{why: desc}
	case "":
		return fmt.Errorf("the issuer answered %s", re.Response.Status)
	}
	return errors.New(desc)
}
