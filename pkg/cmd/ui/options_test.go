package ui

import (
	"strings"
	"testing"
	"time"
)

// TestValidate: ichor-ui refuses to start without HTTPS or an issuer, or
// with a session lifetime out of bounds, naming every problem at once.
func TestValidate(t *testing.T) {
	o := NewOptions()
	o.SessionLifetime = 40 * 24 * time.Hour
	err := o.Validate()
	if err == nil {
		t.Fatal("no TLS, no issuer and a 40-day session were accepted")
	}
	for _, want := range []string{"--tls-cert-file and --tls-private-key-file are required", "--issuer-url is required", "--session-lifetime 960h0m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not say %q", err, want)
		}
	}
	o = NewOptions()
	o.TLSCertFile, o.TLSKeyFile, o.IssuerURL = "tls.crt", "tls.key", "https://ichor-auth.example.net"
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults with TLS and an issuer: %v", err)
	}
}

// TestValidateOIDC: sign-in at an OpenID provider needs an https issuer and
// a client; its other flags mean nothing without an issuer.
func TestValidateOIDC(t *testing.T) {
	base := func() *Options {
		o := NewOptions()
		o.TLSCertFile, o.TLSKeyFile, o.IssuerURL = "tls.crt", "tls.key", "https://ichor-auth.example.net"
		return o
	}
	for _, c := range []struct {
		issuer, client, ca string
		want               string
	}{
		{"http://idp.example.net", "ichor-ui", "", `--oidc-issuer-url "http://idp.example.net": an https URL`},
		{"https://idp.example.net", "", "", "--oidc-client-id is required"},
		{"", "ichor-ui", "ca.crt", "need --oidc-issuer-url"},
		{"https://idp.example.net", "ichor-ui", "", ""},
	} {
		o := base()
		o.OIDCIssuerURL, o.OIDCClientID, o.OIDCCAFile = c.issuer, c.client, c.ca
		err := o.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("issuer %q client %q ca %q: %v, want %q", c.issuer, c.client, c.ca, err, c.want)
		}
	}
}

// TestValidateOIDCRedirect: the redirect URL is the console's callback over https.
func TestValidateOIDCRedirect(t *testing.T) {
	for redirect, ok := range map[string]bool{
		"https://console.example.net/oidc/callback": true,
		"http://console.example.net/oidc/callback":  false,
		"https://console.example.net/elsewhere":     false,
	} {
		o := NewOptions()
		o.TLSCertFile, o.TLSKeyFile, o.IssuerURL = "tls.crt", "tls.key", "https://ichor-auth.example.net"
		o.OIDCIssuerURL, o.OIDCClientID, o.OIDCRedirectURL = "https://idp.example.net", "ichor-ui", redirect
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("%s: %v, want ok %v", redirect, err, ok)
		}
	}
}
