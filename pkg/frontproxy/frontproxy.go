// Package frontproxy authenticates the requests kube-apiserver's aggregation
// layer proxies to ichor-apiserver, checking the front proxy's client
// certificate once per certificate rather than once per request.
//
// k8s.io/apiserver's request-header authenticator verifies the proxy's
// certificate chain against the request-header CA on every request (a
// signature check and a chain build), although kube-apiserver sends every
// request over a few long-lived connections with the same certificate. The
// answer of that
// verification depends only on the chain, the CA bundle and the time, so it
// is kept per chain until the CA bundle changes, a certificate of the chain
// leaves its validity, or a minute passes. What stays per request is what can
// change between requests: the allowed client names and the headers.
//
// The proof that the client holds the certificate's key is the TLS handshake,
// made on every connection, which is unchanged: a cached chain is of no use
// to anyone who cannot complete a handshake with it.
package frontproxy

import (
	"bytes"
	"crypto/x509"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
)

// checkTTL bounds how long one verification of a chain is relied on.
const checkTTL = time.Minute

// maxChains bounds the chains kept; kube-apiserver presents one (two while
// its front-proxy certificate is being replaced).
const maxChains = 16

// authn is the front proxy's authenticator in front of next.
type authn struct {
	cfg *authenticatorfactory.RequestHeaderConfig
	// headers reads the user from the request's headers, as the
	// request-header authenticator does once the certificate is verified,
	// and adds system:authenticated as the delegated authenticator does.
	headers authenticator.Request
	next    authenticator.Request
	now     func() time.Time

	mu       sync.Mutex
	verified map[string]check // by the leaf certificate's DER
}

// check is one successful verification of a presented chain.
type check struct {
	intermediates [][]byte
	// roots is the CA bundle the chain was verified with; the bundle's
	// provider hands out a new pool when its content changes.
	roots *x509.CertPool
	// notBefore and notAfter bound when every certificate of the verified
	// chain is valid; until is when the check is made again regardless.
	notBefore, notAfter, until time.Time
}

// New returns an authenticator that takes a request whose client certificate
// is a front-proxy certificate of cfg (verified against cfg's CA bundle, its
// common name allowed) by its request headers, and passes every other request,
// and a proxied request without a user header, to next unchanged. next is the
// delegated authenticator k8s.io/apiserver built from the same cfg, which then
// decides it as it would have.
func New(cfg *authenticatorfactory.RequestHeaderConfig, next authenticator.Request) authenticator.Request {
	return newAuthn(cfg, next, time.Now)
}

func newAuthn(cfg *authenticatorfactory.RequestHeaderConfig, next authenticator.Request, now func() time.Time) *authn {
	headers := headerrequest.NewDynamic(cfg.UsernameHeaders, cfg.UIDHeaders, cfg.GroupHeaders, cfg.ExtraHeaderPrefixes)
	return &authn{cfg: cfg, headers: group.NewAuthenticatedGroupAdder(headers), next: next, now: now, verified: map[string]check{}}
}

func (a *authn) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 || !a.isProxy(req.TLS.PeerCertificates) {
		return a.next.AuthenticateRequest(req)
	}
	resp, ok, err := a.headers.AuthenticateRequest(req)
	if err != nil || !ok {
		return a.next.AuthenticateRequest(req)
	}
	return resp, true, nil
}

// isProxy is whether chain verifies against the request-header CA bundle for
// client authentication and its leaf has an allowed common name.
func (a *authn) isProxy(chain []*x509.Certificate) bool {
	if names := a.cfg.AllowedClientNames.Value(); len(names) > 0 && !slices.Contains(names, chain[0].Subject.CommonName) {
		return false
	}
	opts, ok := a.cfg.CAContentProvider.VerifyOptions()
	if !ok {
		return false
	}
	now := a.now()
	a.mu.Lock()
	c, seen := a.verified[string(chain[0].Raw)]
	a.mu.Unlock()
	if seen && c.roots == opts.Roots && c.holds(chain[1:], now) {
		return true
	}
	if opts.Intermediates == nil && len(chain) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range chain[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	opts.CurrentTime = now
	chains, err := chain[0].Verify(opts)
	if err != nil {
		return false
	}
	c = check{roots: opts.Roots, until: now.Add(checkTTL)}
	for _, ic := range chain[1:] {
		c.intermediates = append(c.intermediates, ic.Raw)
	}
	for _, vc := range chains[0] {
		if c.notBefore.IsZero() || vc.NotBefore.After(c.notBefore) {
			c.notBefore = vc.NotBefore
		}
		if c.notAfter.IsZero() || vc.NotAfter.Before(c.notAfter) {
			c.notAfter = vc.NotAfter
		}
	}
	a.mu.Lock()
	if len(a.verified) >= maxChains {
		clear(a.verified)
	}
	a.verified[string(chain[0].Raw)] = c
	a.mu.Unlock()
	return true
}

// holds is whether c still answers for a leaf presented with intermediates at now.
func (c check) holds(intermediates []*x509.Certificate, now time.Time) bool {
	if now.Before(c.notBefore) || now.After(c.notAfter) || !now.Before(c.until) || len(intermediates) != len(c.intermediates) {
		return false
	}
	for i, ic := range intermediates {
		if !bytes.Equal(ic.Raw, c.intermediates[i]) {
			return false
		}
	}
	return true
}
