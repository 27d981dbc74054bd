package ui

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"ichor.dev/ichor/pkg/issuer"
	"ichor.dev/ichor/pkg/ratelimit"
)

// Password sign-ins are limited per browser address at the console, before
// ichor-auth is asked: signInBurst attempts, then one every signInEvery.
// ichor-auth limits them again, per user and per the browser's address,
// which the console names to it (issuer.ClientAddressHeader) over a
// connection with its trusted-proxy client certificate.
const (
	signInBurst = 10
	signInEvery = 6 * time.Second
)

func newSignInLimiter() *ratelimit.Limiter {
	return ratelimit.New(func(string) (time.Duration, int) { return signInEvery, signInBurst }, signInBurst*signInEvery)
}

// clientKey keys the browser's address in a request's context.
type clientKey struct{}

// withBrowser records r's browser address in its context, for the
// requests to ichor-auth made while serving it.
func withBrowser(r *http.Request) *http.Request {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), clientKey{}, ip.Unmap().String()))
}

// browserOf is the browser address withBrowser recorded, if any.
func browserOf(ctx context.Context) string {
	addr, _ := ctx.Value(clientKey{}).(string)
	return addr
}

// forBrowser names, to ichor-auth, the browser req is sent for.
func forBrowser(req *http.Request) {
	if addr := browserOf(req.Context()); addr != "" {
		req.Header.Set(issuer.ClientAddressHeader, addr)
	}
}
