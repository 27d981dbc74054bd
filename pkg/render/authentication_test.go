package render

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestRenderOIDCTrust: spec.authentication becomes a control plane's
// kube-apiserver flags, with every name prefixed oidc:, and its caBundle a
// TrustedRootsConfig that kube-apiserver reads through a read-only mount;
// on a control plane it restarts kube-apiserver, and a worker does not
// change at all.
func TestRenderOIDCTrust(t *testing.T) {
	ca := testCAPEM(t)
	auth := &ichorv1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com/realms/x", ClientID: "kubernetes",
		UsernameClaim: "email", GroupsClaim: "groups", CABundle: ca}

	t.Run("control plane", func(t *testing.T) {
		in := testInput(t, testMachine("cp-1", ichorv1alpha1.MachineRoleControlPlane, nil))
		plain, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		in.Cluster.Spec.Authentication = auth
		out, err := Render(in)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		cfg, err := configloader.NewFromBytes(out.Config)
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		args := cfg.K8sAPIServerConfig().ExtraArgs()
		want := map[string]string{
			"oidc-issuer-url": auth.IssuerURL, "oidc-client-id": "kubernetes",
			"oidc-username-claim": "email", "oidc-username-prefix": "oidc:",
			"oidc-groups-claim": "groups", "oidc-groups-prefix": "oidc:",
			"oidc-ca-file": "/etc/ssl/certs/ca-certificates.crt",
		}
		for k, v := range want {
			if got := args[k]; len(got) != 1 || got[0] != v {
				t.Errorf("extraArgs[%s] = %q, want %q", k, got, v)
			}
		}
		if algs := args["oidc-signing-algs"]; len(algs) != 1 || strings.Contains(algs[0], "HS") || !strings.Contains(algs[0], "ES256") {
			t.Errorf("oidc-signing-algs = %q: want asymmetric algorithms, ES256 among them", algs)
		}
		vols := cfg.K8sAPIServerConfig().ExtraVolumes()
		if !slices.ContainsFunc(vols, func(v talosconfig.VolumeMount) bool {
			return v.HostPath() == "/etc/ssl/certs" && v.MountPath() == "/etc/ssl/certs" && v.ReadOnly()
		}) {
			t.Errorf("no read-only mount of the trusted roots in %+v", vols)
		}
		roots := cfg.TrustedRoots().ExtraTrustedRootCertificates()
		if len(roots) != 1 || !strings.Contains(roots[0], strings.TrimSpace(ca)) {
			t.Errorf("trusted roots = %q, want the caBundle", roots)
		}
		effect, _, err := Classify(plain.Config, out.Config, ApplyWithReboot)
		if err != nil || effect != ichorv1alpha1.ConfigEffectAPIServerRestart {
			t.Errorf("effect %s (%v), want APIServerRestart", effect, err)
		}
	})

	t.Run("without a CA", func(t *testing.T) {
		in := testInput(t, testMachine("cp-1", ichorv1alpha1.MachineRoleControlPlane, nil))
		a := *auth
		a.CABundle = ""
		in.Cluster.Spec.Authentication = &a
		out, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(out.Config)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cfg.K8sAPIServerConfig().ExtraArgs()["oidc-ca-file"]; ok {
			t.Error("oidc-ca-file set without a caBundle: kube-apiserver would trust only that file")
		}
		if len(cfg.K8sAPIServerConfig().ExtraVolumes()) != 0 || len(cfg.TrustedRoots().ExtraTrustedRootCertificates()) != 0 {
			t.Error("a mount or roots without a caBundle")
		}
	})

	t.Run("worker", func(t *testing.T) {
		in := testInput(t, testMachine("w-1", ichorv1alpha1.MachineRoleWorker, nil))
		plain, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		in.Cluster.Spec.Authentication = auth
		out, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		if out.Hash != plain.Hash {
			t.Error("a worker's config changed with the cluster's OIDC trust")
		}
	})
}

func testCAPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issuer CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
