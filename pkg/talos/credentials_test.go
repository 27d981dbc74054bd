package talos_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/talos"
)

func TestSignClientCertificate(t *testing.T) {
	bundle, _ := controlPlaneConfig(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certPEM, notAfter, err := talos.SignClientCertificate(bundle, key.Public(), "alice", role.MakeSet(role.EtcdBackup), now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "alice" || !slices.Equal(cert.Subject.Organization, []string{string(role.EtcdBackup)}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got != 10*time.Minute || !cert.NotAfter.Equal(notAfter) || cert.NotBefore.After(now) {
		t.Errorf("valid %s to %s (lifetime %s), returned notAfter %s", cert.NotBefore, cert.NotAfter, got, notAfter)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
		t.Errorf("usages %v, CA %v; want a client certificate", cert.ExtKeyUsage, cert.IsCA)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle.Certs.OS.Crt)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("not signed by the Talos API CA: %v", err)
	}

	noKey := *bundle
	noKey.Certs = nil
	if _, _, err := talos.SignClientCertificate(&noKey, key.Public(), "alice", role.MakeSet(role.Reader), now, time.Minute); err == nil || !strings.Contains(err.Error(), "no Talos API CA key") {
		t.Errorf("bundle without a CA: %v", err)
	}
}
