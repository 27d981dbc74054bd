package talos_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/test/talossim"
)

// controlPlaneConfig is a bundle and a control-plane config rendered from it.
func controlPlaneConfig(t *testing.T) (*secrets.Bundle, []byte) {
	t.Helper()
	return controlPlaneConfigOf(t, "v1.13.0")
}

// controlPlaneConfigOf is a control plane's config as machinery generates
// it for the contract of Talos version, with a bundle of its own.
func controlPlaneConfigOf(t *testing.T, version string) (*secrets.Bundle, []byte) {
	t.Helper()
	contract, err := config.ParseContractFromVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("sim", "https://127.0.0.1:6443", constants.DefaultKubernetesVersion,
		generate.WithVersionContract(contract), generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/vda"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	data, err := cfg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return bundle, data
}

func adminCredentials(t *testing.T, bundle *secrets.Bundle, ca *secrets.Bundle) talos.Credentials {
	t.Helper()
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), bundle.Certs.OS, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return talos.Credentials{CA: ca.Certs.OS.Crt, Certificate: cert.Crt, Key: cert.Key}
}

func TestConfiguredUsesMutualTLS(t *testing.T) {
	ctx := callContext(t)
	n := startNode(t, simOptions())
	bundle, cfg := controlPlaneConfig(t)
	maintenance := n.MaintenanceFingerprint()

	// Configure the node the way talosctl apply-config --insecure --cert-fingerprint does.
	fp, err := x509.ParseFingerprint(maintenance)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.WithEndpoints(n.Addr()),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, VerifyConnection: x509.MatchSPKIFingerprints(fp)})) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	if _, err := c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cfg}); err != nil {
		t.Fatalf("apply config: %v", err)
	}
	if err := n.WaitPhase(ctx, talossim.PhaseRunning); err != nil {
		t.Fatal(err)
	}

	s, err := talos.Machinery{}.Configured(ctx, n.Addr(), adminCredentials(t, bundle, bundle))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	f, err := s.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts over mutual TLS: %v", err)
	}
	if f.UUID != simOptions().SystemUUID || f.TalosVersion != "v1.13.0" {
		t.Errorf("facts %+v", f)
	}
	if s.Fingerprint() == "" || s.Fingerprint() == maintenance {
		t.Errorf("configured session recorded fingerprint %q (maintenance was %q)", s.Fingerprint(), maintenance)
	}

	// Another cluster's CA does not vouch for this node, and the node does
	// not accept another cluster's client certificate.
	other, _ := controlPlaneConfig(t)
	for name, creds := range map[string]talos.Credentials{
		"foreign CA":          adminCredentials(t, bundle, other),
		"foreign client cert": adminCredentials(t, other, bundle),
	} {
		s, err := talos.Machinery{}.Configured(ctx, n.Addr(), creds)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Facts(ctx); err == nil {
			t.Errorf("%s: Facts succeeded", name)
		}
		_ = s.Close()
	}
	// Nor does a maintenance session reach it any more.
	if _, err := session(t, n.Addr(), talos.Observe()).Facts(ctx); err == nil {
		t.Error("a maintenance session read a configured node")
	}
	if _, err := (talos.Machinery{}).Configured(ctx, n.Addr(), talos.Credentials{CA: []byte("no pem")}); err == nil {
		t.Error("credentials without a CA accepted")
	}
}
