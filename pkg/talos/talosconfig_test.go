package talos

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

func TestCredentialsFromTalosconfig(t *testing.T) {
	ca, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caPEM := x509.NewCertificateAndKeyFromCertificateAuthority(ca)
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), caPEM, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	good := clientconfig.NewConfig("old", []string{"10.9.0.7"}, caPEM.Crt, cert)
	b, err := good.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := CredentialsFromTalosconfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(creds.CA) != string(caPEM.Crt) || string(creds.Certificate) != string(cert.Crt) || string(creds.Key) != string(cert.Key) {
		t.Errorf("credentials do not match the talosconfig's")
	}

	otherCert, err := secrets.NewAdminCertificateAndKey(time.Now(), caPEM, role.MakeSet(role.Reader), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(c *clientconfig.Config)
	}{
		{"no current context", "names no current context", func(c *clientconfig.Config) { c.Context = "" }},
		{"unknown current context", `"gone" is not among its contexts`, func(c *clientconfig.Config) { c.Context = "gone" }},
		{"no key", `has no key`, func(c *clientconfig.Config) { c.Contexts["old"].Key = "" }},
		{"not base64", `crt is not base64`, func(c *clientconfig.Config) { c.Contexts["old"].Crt = "%%%" }},
		{"key of another certificate", `crt and key are not a certificate and its key`, func(c *clientconfig.Config) {
			c.Contexts["old"].Key = clientconfig.NewConfig("x", nil, caPEM.Crt, otherCert).Contexts["x"].Key
		}},
	} {
		c := clientconfig.NewConfig("old", []string{"10.9.0.7"}, caPEM.Crt, cert)
		tc.edit(c)
		b, err := c.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		_, err = CredentialsFromTalosconfig(b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "BEGIN") {
			t.Errorf("%s: the error shows key material: %v", tc.name, err)
		}
	}
	if _, err := CredentialsFromTalosconfig([]byte("{{{")); err == nil || !strings.Contains(err.Error(), "not a talosconfig") {
		t.Errorf("garbage: %v", err)
	}
}
