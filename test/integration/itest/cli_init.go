package itest

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
)

func VerifyLeaf(t *testing.T, certPEM []byte, ca *x509.Certificate) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("certificate %s is not signed by the bundle's CA: %v", leaf.Subject, err)
	}
	return leaf
}
