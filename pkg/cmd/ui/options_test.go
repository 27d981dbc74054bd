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
