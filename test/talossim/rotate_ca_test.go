package talossim

import (
	"encoding/base64"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// TestTalosctlRotateTalosCA runs the official talosctl v1.13 rotate-ca for the Talos API CA against a
// control plane: it reads the current CA from the node's OSRoot, makes a new CA accepted, then issuing
// with the old one accepted, then drops the old one, each a NO_REBOOT apply of the active config
// (re-encoded with its docs and examples, as talosctl writes it), checking the node answers with each
// phase's credentials. Afterwards the written talosconfig works, the node serves a certificate from the
// new CA alone, and a client certificate from the old CA is refused. No phase reboots the node.
func TestTalosctlRotateTalosCA(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl := newCluster(t)
	n, admin := bootstrappedNode(t, cl, Options{
		Hostname:  "cp-rotate",
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.11/24")},
		Etcd:      &EtcdCluster{Name: "talosctl-rotate-ca"},
	})
	nodeIP := "10.5.0.11"
	ctx := testContext(t)

	// OSRoot is os:admin's alone, as on a real node.
	reader := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Reader))
	if _, err := safe.StateGetByID[*secrets.OSRoot](ctx, reader.COSI, secrets.OSRootID); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("a reader's OSRoot get: %v", err)
	}

	root, err := safe.StateGetByID[*secrets.OSRoot](ctx, admin.COSI, secrets.OSRootID)
	if err != nil {
		t.Fatalf("OSRoot: %v", err)
	}

	if spec := root.TypedSpec(); string(spec.IssuingCA.Crt) != string(cl.bundle.Certs.OS.Crt) || len(spec.AcceptedCAs) != 1 ||
		string(spec.AcceptedCAs[0].Crt) != string(cl.bundle.Certs.OS.Crt) || spec.Token == "" {
		t.Fatalf("OSRoot before the rotation: issuing %v, %d accepted", spec.IssuingCA != nil, len(spec.AcceptedCAs))
	}

	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	newCfg := filepath.Join(t.TempDir(), "talosconfig-rotated")
	bootID := n.BootID()

	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "rotate-ca", "--talos=true", "--kubernetes=false", "--dry-run=false",
		"--control-plane-nodes", nodeIP, "--output", newCfg).mustSucceed(t)
	wantLine(t, r, r.stdout, `Verifying connectivity with new client cert, but old server CA`)
	wantLine(t, r, r.stdout, `Writing new talosconfig to`)

	if n.BootID() != bootID || n.Phase() != PhaseRunning {
		t.Fatalf("the rotation rebooted the node: boot ID %s (was %s), phase %s", n.BootID(), bootID, n.Phase())
	}

	rotated, err := clientconfig.Open(newCfg)
	if err != nil {
		t.Fatal(err)
	}

	newCA := rotated.Contexts[rotated.Context].CA
	runTalosctl(t, bin, "", "--talosconfig", newCfg, "--nodes", nodeIP, "version").mustSucceed(t)

	// The node's own view: the new CA issues, nothing else is accepted.
	rc := rotated.Contexts[rotated.Context]
	newAdmin := certClient(t, n, decodeB64(t, rc.CA), &x509.PEMEncodedCertificateAndKey{Crt: decodeB64(t, rc.Crt), Key: decodeB64(t, rc.Key)})
	root, err = safe.StateGetByID[*secrets.OSRoot](ctx, newAdmin.COSI, secrets.OSRootID)
	if err != nil {
		t.Fatalf("OSRoot after: %v", err)
	}

	if spec := root.TypedSpec(); string(spec.IssuingCA.Crt) == string(cl.bundle.Certs.OS.Crt) || len(spec.AcceptedCAs) != 1 ||
		string(spec.AcceptedCAs[0].Crt) != string(spec.IssuingCA.Crt) {
		t.Fatalf("OSRoot after the rotation: the old CA still issues or is accepted (%d accepted)", len(spec.AcceptedCAs))
	}

	mc, err := safe.StateGetByID[*config.MachineConfig](ctx, newAdmin.COSI, config.ActiveID)
	if err != nil {
		t.Fatal(err)
	}

	if sec := mc.Config().Machine().Security(); len(sec.AcceptedCAs()) != 0 || string(sec.IssuingCA().Crt) != string(root.TypedSpec().IssuingCA.Crt) {
		t.Fatalf("active config after the rotation: %d accepted CAs", len(sec.AcceptedCAs()))
	}

	// The old talosconfig no longer trusts the node, and the old CA's client certificate is refused even
	// by a client that trusts the new CA.
	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "version").mustFail(t, "certificate signed by unknown authority")

	oldCert := roleCert(t, cl.bundle, role.Admin)
	mixed := clientconfig.NewConfig("sim", []string{n.Addr()}, decodeB64(t, newCA), oldCert)
	mixedPath := filepath.Join(t.TempDir(), "talosconfig-old-cert")

	if err = mixed.Save(mixedPath); err != nil {
		t.Fatal(err)
	}

	// TLS 1.3 reports the refused certificate to the client as a broken connection.
	runTalosctl(t, bin, "", "--talosconfig", mixedPath, "--nodes", nodeIP, "version").mustFail(t, "Unavailable")
}

// decodeB64 decodes a talosconfig's base64 PEM field.
func decodeB64(t *testing.T, s string) []byte {
	t.Helper()

	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("talosconfig field: %v", err)
	}

	return b
}
