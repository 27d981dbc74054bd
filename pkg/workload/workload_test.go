package workload

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

func testBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClientConfigSignsAShortLivedClientCertificate(t *testing.T) {
	b := testBundle(t)
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	cfg, err := ClientConfig(b, "https://127.0.0.1:6443", Identity{User: "ichor:controller", Groups: []string{"g1"}}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != string(b.Certs.K8s.Crt) || cfg.Insecure {
		t.Errorf("config trusts %q at %s (insecure %t)", cfg.CAData, cfg.Host, cfg.Insecure)
	}
	block, _ := pem.Decode(cfg.CertData)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode(b.Certs.K8s.Crt)
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("not signed by the bundle's Kubernetes CA: %v", err)
	}
	if cert.Subject.CommonName != "ichor:controller" || !slices.Equal(cert.Subject.Organization, []string{"g1"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
		t.Errorf("usages %v, CA %t", cert.ExtKeyUsage, cert.IsCA)
	}
	if got := cert.NotAfter.Sub(now); got != 10*time.Minute {
		t.Errorf("valid for %s after now, want 10m", got)
	}
	if _, err := ClientConfig(&secrets.Bundle{}, "https://x", Controller, now, time.Minute); err == nil {
		t.Error("signed without a CA")
	}
}

// TestControllerRulesStayLeast fails when the controller's role in managed
// clusters grows: on certificates.k8s.io it holds exactly what approving
// kubelet serving certificates needs, and elsewhere only reads nodes.
func TestControllerRulesStayLeast(t *testing.T) {
	type rule struct{ group, resource, name, verb string }
	var got []rule
	for _, r := range ControllerRules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					names := r.ResourceNames
					if len(names) == 0 {
						names = []string{""}
					}
					for _, n := range names {
						got = append(got, rule{g, res, n, v})
					}
				}
			}
		}
	}
	want := []rule{
		{"", "nodes", "", "get"}, {"", "nodes", "", "list"}, {"", "nodes", "", "watch"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "get"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "list"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "watch"},
		{"certificates.k8s.io", "certificatesigningrequests/approval", "", "update"},
		{"certificates.k8s.io", "signers", KubeletServingSigner, "approve"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("controller rules\n got %v\nwant %v", got, want)
	}
}
