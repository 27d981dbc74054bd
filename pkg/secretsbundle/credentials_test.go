package secretsbundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

func generated(t *testing.T) *Secrets {
	t.Helper()
	data, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return &Secrets{Bundle: b}
}

func notAfter(t *testing.T, certPEM []byte) time.Time {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter
}

// One certificate serves a cluster's sessions for the first quarter of its
// lifetime; then, and for other roles, lifetimes or CAs, another is minted.
func TestTalosCredentialsServeAQuarterOfTheirLifetime(t *testing.T) {
	s, other := generated(t), generated(t)
	admin := role.MakeSet(role.Admin)
	const ttl = 10 * time.Minute
	t0 := time.Now()
	mint := func(s *Secrets, roles role.Set, at time.Time, ttl time.Duration) []byte {
		t.Helper()
		creds, err := s.TalosCredentials(roles, at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(creds.CA, s.TalosCA()) {
			t.Errorf("the credentials do not trust the CAs in force")
		}
		return creds.Certificate
	}
	first := mint(s, admin, t0, ttl)
	again := t0.Add(ttl/4 - time.Second)
	if cert := mint(s, admin, again, ttl); !bytes.Equal(cert, first) {
		t.Errorf("a new certificate within a quarter of the lifetime")
	} else if left := notAfter(t, cert).Sub(again); left <= ttl/2 {
		t.Errorf("a certificate handed out with %v left, want more than half of %v", left, ttl)
	}
	later := mint(s, admin, t0.Add(ttl/4), ttl)
	if bytes.Equal(later, first) {
		t.Fatalf("the same certificate after a quarter of its lifetime")
	}
	if left := notAfter(t, later).Sub(t0.Add(ttl / 4)); left < ttl-time.Minute {
		t.Errorf("the new certificate has %v left, want about %v", left, ttl)
	}
	for what, cert := range map[string][]byte{
		"other roles":    mint(s, role.MakeSet(role.Reader), t0.Add(ttl/4), ttl),
		"other lifetime": mint(s, admin, t0.Add(ttl/4), ttl/2),
		"other CA":       mint(other, admin, t0.Add(ttl/4), ttl),
	} {
		if bytes.Equal(cert, later) {
			t.Errorf("%s: the same certificate", what)
		}
	}
	if before := mint(s, admin, t0.Add(-time.Minute), ttl); bytes.Equal(before, first) || bytes.Equal(before, later) {
		t.Errorf("a clock that went back got a certificate minted later")
	}
}
