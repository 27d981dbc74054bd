package talossim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// Fidelity checks of Talos v1.14 behaviours against the official talosctl v1.14.1 and simulated
// v1.14.1 nodes.

// resetDelay is how long a reset runs before it stops the node's API, as a real node's reset sequence
// takes seconds to get there: `talosctl reset --wait` watches the node's events for that moment, and
// starts watching as it sends the reset, not before.
const resetDelay = 2 * time.Second

// controlPlane1_14 bootstraps a v1.14.1 control plane of the v1.14 cluster with cfg (the cluster's
// control plane config when nil) at ip, and returns it with a talosconfig of os:admin.
func controlPlane1_14(t *testing.T, ip string, cfg []byte, opts Options) (*Node, *testCluster, string) {
	t.Helper()

	cl, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	if cfg != nil {
		cl = &testCluster{bundle: cl.bundle, cp: cfg, worker: cl.worker}
	}

	opts.Version = "v1.14.1"
	opts.Addresses = []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(ip), 24)}
	opts.RebootDelay = 300 * time.Millisecond

	if opts.Etcd == nil {
		opts.Etcd = &EtcdCluster{Name: "talosctl-" + ip}
	}

	n, _ := bootstrappedNode(t, cl, opts)

	return n, cl, writeTalosconfig(t, n, cl, role.Admin)
}

// TestTalosctl1_14Upgrade: talosctl v1.14.1 upgrades a v1.14.1 control plane to the same version from
// another installer image (another Image Factory schematic, say): it pulls the image, runs the
// installer through LifecycleService, reboots the node and waits until it is back, now running what
// the new image installed. An installer that fails is reported with its exit code (7, an installation
// error) and output, and the node is not rebooted. Through the legacy MachineService.Upgrade
// (--legacy), the upgrade sequence's error fails the wait and the node reboots into what it ran.
func TestTalosctl1_14Upgrade(t *testing.T) {
	t.Parallel()

	bin := talosctl1_14(t)
	schematic := "factory.test/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1"
	broken := "factory.test/metal-installer/0000000000000000000000000000000000000000000000000000000000000000:v1.14.1"
	n, _, adminCfg := controlPlane1_14(t, "10.5.0.31", nil, Options{Registry: NewRegistry(schematic, broken)})
	node := "10.5.0.31"
	ctx := testContext(t)

	before := n.BootID()
	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "upgrade", "--drain=false", "--wait", "--progress=plain",
		"--image", schematic).mustSucceed(t)
	wantLine(t, r, r.stderr, "^"+regexp.QuoteMeta(node+": ")+`\d{4}/\d\d/\d\d \d\d:\d\d:\d\d running Talos installer v1\.14\.1$`)
	wantLine(t, r, r.stderr, regexp.QuoteMeta(node+": upgrade completed"))

	if after := n.BootID(); after == before || n.Version() != "v1.14.1" || n.RunningImage() != schematic || n.Phase() != PhaseRunning {
		t.Fatalf("after talosctl upgrade --wait: boot ID %s (was %s), version %s from %q, phase %s", after, before, n.Version(), n.RunningImage(), n.Phase())
	}
	// The factory's image carries its schematic, as an extension and as v1.14's resource.
	const id = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "get", "extensions").mustSucceed(t)
	wantLine(t, r, r.stdout, regexp.QuoteMeta(node)+`\s+runtime\s+ExtensionStatus\s+0\s+\d+\s+schematic\s+`+id+`$`)
	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "get", "imagefactoryschematic").mustSucceed(t)
	wantLine(t, r, r.stdout, regexp.QuoteMeta(node)+`\s+runtime\s+ImageFactorySchematic\s+image-factory-schematic\s+\d+\s+`+id+`\s+Image Factory\s+https://factory\.test$`)

	if err := n.SetFaults(Faults{InstallerFails: map[string]string{broken: "failed to install bootloader: input/output error"}}); err != nil {
		t.Fatal(err)
	}

	before = n.BootID()
	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "upgrade", "--drain=false", "--wait", "--progress=plain",
		"--image", broken).mustFail(t, "error during upgrade: node "+node+": upgrade failed with exit code 7")
	wantLine(t, r, r.stderr, regexp.QuoteMeta(node+": failed to install bootloader: input/output error"))
	wantLine(t, r, r.stderr, regexp.QuoteMeta(node+": upgrade failed with exit code 7 (installation error)"))

	if n.BootID() != before || n.RunningImage() != schematic || n.Phase() != PhaseRunning {
		t.Fatalf("after a failed upgrade: boot ID %s (was %s), running %q, phase %s", n.BootID(), before, n.RunningImage(), n.Phase())
	}

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "upgrade", "--legacy", "--wait", "--image", broken).
		mustFail(t, `sequence error: sequence failed: error running phase 13 in upgrade sequence: task 1/1: failed, task "upgrade" failed: exit code 7`)

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if h := n.PhaseHistory(); !slices.Equal(h[len(h)-3:], []Phase{PhaseUpgrading, PhaseRebooting, PhaseRunning}) || n.BootID() == before ||
		n.RunningImage() != schematic {
		t.Fatalf("after a failed legacy upgrade: history %v, running %q", h, n.RunningImage())
	}
}

// TestTalosctl1_14RotateTalosCA: talosctl v1.14.1 rotates the Talos API CA of a v1.14.1 control plane as
// v1.13's does (rotate_ca_test.go): three applies without a reboot, after which the talosconfig it wrote
// works, the node's OSRoot has the new CA alone, and the old talosconfig is refused.
func TestTalosctl1_14RotateTalosCA(t *testing.T) {
	t.Parallel()

	bin := talosctl1_14(t)
	n, cl, adminCfg := controlPlane1_14(t, "10.5.0.32", nil, Options{})
	node := "10.5.0.32"
	newCfg := filepath.Join(t.TempDir(), "talosconfig-rotated")
	bootID := n.BootID()

	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "rotate-ca", "--talos=true", "--kubernetes=false", "--dry-run=false",
		"--control-plane-nodes", node, "--output", newCfg).mustSucceed(t)

	for _, step := range []string{
		"Adding new Talos CA as accepted",
		"Verifying connectivity with new client cert, but old server CA",
		"Making new Talos CA the issuing CA, old Talos CA the accepted CA",
		"Removing old Talos CA from the accepted CAs",
		"Writing new talosconfig to",
	} {
		wantLine(t, r, r.stdout, regexp.QuoteMeta(step))
	}

	if n.BootID() != bootID || n.Phase() != PhaseRunning {
		t.Fatalf("the rotation rebooted the node: boot ID %s (was %s), phase %s", n.BootID(), bootID, n.Phase())
	}

	r = runTalosctl(t, bin, "", "--talosconfig", newCfg, "--nodes", node, "version").mustSucceed(t)
	wantLine(t, r, r.stdout, `^\s*Tag:\s+v1\.14\.1\s*$`)

	rotated, err := clientconfig.Open(newCfg)
	if err != nil {
		t.Fatal(err)
	}

	rc := rotated.Contexts[rotated.Context]
	newAdmin := certClient(t, n, decodeB64(t, rc.CA), &x509.PEMEncodedCertificateAndKey{Crt: decodeB64(t, rc.Crt), Key: decodeB64(t, rc.Key)})

	root, err := safe.StateGetByID[*secrets.OSRoot](testContext(t), newAdmin.COSI, secrets.OSRootID)
	if err != nil {
		t.Fatalf("OSRoot after: %v", err)
	}

	if spec := root.TypedSpec(); bytes.Equal(spec.IssuingCA.Crt, cl.bundle.Certs.OS.Crt) || len(spec.AcceptedCAs) != 1 ||
		!bytes.Equal(spec.AcceptedCAs[0].Crt, spec.IssuingCA.Crt) {
		t.Fatalf("OSRoot after the rotation: the old CA still issues or is accepted (%d accepted)", len(spec.AcceptedCAs))
	}

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "version").mustFail(t, "certificate signed by unknown authority")
}

// TestTalosctl1_14EtcdSnapshot: talosctl v1.14.1 saves a v1.14.1 control plane's etcd snapshot, exactly
// the bytes the simulator serves, and reads it back as an etcd backend.
func TestTalosctl1_14EtcdSnapshot(t *testing.T) {
	t.Parallel()

	bin := talosctl1_14(t)
	etcd := &EtcdCluster{Name: "talosctl-1.14-snapshot"}
	_, _, adminCfg := controlPlane1_14(t, "10.5.0.33", nil, Options{Etcd: etcd})

	if rev := etcd.AdvanceRevision(99); rev != 100 {
		t.Fatalf("revision = %d, want 100", rev)
	}

	dir := t.TempDir()
	r := runTalosctl(t, bin, dir, "--talosconfig", adminCfg, "--nodes", "10.5.0.33", "etcd", "snapshot", "db.snapshot").mustSucceed(t)
	wantLine(t, r, r.stdout, regexp.QuoteMeta(fmt.Sprintf(`etcd snapshot saved to "db.snapshot" (%d bytes)`, DefaultSnapshotSize)))

	got, err := os.ReadFile(filepath.Join(dir, "db.snapshot"))
	if err != nil {
		t.Fatal(err)
	}

	want, err := etcd.snapshot()
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got, want) {
		t.Fatalf("talosctl saved %d bytes (sha256 %x), the simulator serves %d (sha256 %x)", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}

	st := readSnapshotStatus(t, got)
	wantLine(t, r, r.stdout, "^"+regexp.QuoteMeta(fmt.Sprintf("snapshot info: hash %08x, revision 100, total keys %d, total size %d",
		st.hash, st.totalKeys, DefaultSnapshotSize-sha256.Size))+"$")
}

// TestTalosctl1_14ResetEtcdVolume: talosctl v1.14.1 resets v1.14.1 control planes by label. Where ETCD is a
// directory on EPHEMERAL (the default) it cannot be wiped alone, and wiping EPHEMERAL wipes etcd's data.
// Where a VolumeConfig gave ETCD a partition of its own, wiping EPHEMERAL keeps etcd's data (etcd comes
// back as the same member, and a snapshot can be taken), and wiping ETCD drops it. `reset --wait`
// follows each reset until the node rebooted.
func TestTalosctl1_14ResetEtcdVolume(t *testing.T) {
	t.Parallel()

	bin := talosctl1_14(t)

	t.Run("directory", func(t *testing.T) {
		t.Parallel()

		etcd := &EtcdCluster{}
		n, _, adminCfg := controlPlane1_14(t, "10.5.0.34", nil, Options{Etcd: etcd, ResetDelay: resetDelay})
		talosctl := func(args ...string) talosctlResult {
			return runTalosctl(t, bin, "", append([]string{"--talosconfig", adminCfg, "--nodes", "10.5.0.34"}, args...)...)
		}

		r := talosctl("get", "volumestatus").mustSucceed(t)
		wantLine(t, r, r.stdout, `VolumeStatus\s+ETCD\s+\d+\s+directory\s+ready\s*$`)
		wantLine(t, r, r.stdout, `VolumeStatus\s+EPHEMERAL\s+\d+\s+partition\s+ready\s+/dev/sda4`)

		talosctl("reset", "--system-labels-to-wipe", "ETCD", "--reboot", "--graceful=false").
			mustFail(t, `failed to reset: volume "ETCD" resides on volume "EPHEMERAL", and therefore "ETCD" cannot be wiped without wiping "EPHEMERAL"`)

		before := n.BootID()
		talosctl("reset", "--system-labels-to-wipe", "EPHEMERAL", "--reboot", "--graceful=false").mustSucceed(t)

		if n.BootID() == before || n.Phase() != PhaseRunning || etcd.Bootstrapped() {
			t.Fatalf("after the reset: boot ID %s (was %s), phase %s, etcd bootstrapped %v", n.BootID(), before, n.Phase(), etcd.Bootstrapped())
		}

		talosctl("etcd", "snapshot", filepath.Join(t.TempDir(), "db.snapshot")).mustFail(t, "etcd is not running")
	})

	t.Run("partition", func(t *testing.T) {
		t.Parallel()

		cl, err := sharedCluster1_14()
		if err != nil {
			t.Fatal(err)
		}

		etcd := &EtcdCluster{}
		n, _, adminCfg := controlPlane1_14(t, "10.5.0.35", append(slices.Clone(cl.cp), promoted("ETCD")...), Options{Etcd: etcd, ResetDelay: resetDelay})
		talosctl := func(args ...string) talosctlResult {
			return runTalosctl(t, bin, "", append([]string{"--talosconfig", adminCfg, "--nodes", "10.5.0.35"}, args...)...)
		}

		r := talosctl("get", "volumestatus").mustSucceed(t)
		wantLine(t, r, r.stdout, `VolumeStatus\s+ETCD\s+\d+\s+partition\s+ready\s+/dev/sda4`)
		wantLine(t, r, r.stdout, `VolumeStatus\s+EPHEMERAL\s+\d+\s+partition\s+ready\s+/dev/sda5`)

		member := etcd.Members()[0].ID
		before := n.BootID()
		talosctl("reset", "--system-labels-to-wipe", "EPHEMERAL", "--reboot", "--graceful=false").mustSucceed(t)

		if got := etcd.Members(); n.BootID() == before || !etcd.Bootstrapped() || len(got) != 1 || got[0].ID != member {
			t.Fatalf("after wiping EPHEMERAL: boot ID %s (was %s), etcd bootstrapped %v, members %+v", n.BootID(), before, etcd.Bootstrapped(), got)
		}

		talosctl("etcd", "snapshot", filepath.Join(t.TempDir(), "db.snapshot")).mustSucceed(t)

		talosctl("reset", "--system-labels-to-wipe", "ETCD", "--reboot", "--graceful=false").mustSucceed(t)

		if etcd.Bootstrapped() {
			t.Fatal("wiping ETCD kept etcd's data")
		}
	})
}

// TestTalosctlResetEtcdLabel: talosctl v1.13 against a v1.13 control plane, whose ETCD volume is a
// directory that a reset may not name at all.
func TestTalosctlResetEtcdLabel(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl := newCluster(t)
	etcd := &EtcdCluster{}
	n, _ := bootstrappedNode(t, cl, Options{Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.36/24")}, Etcd: etcd})
	adminCfg := writeTalosconfig(t, n, cl, role.Admin)

	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", "10.5.0.36", "get", "volumestatus", "ETCD").mustSucceed(t)
	wantLine(t, r, r.stdout, `VolumeStatus\s+ETCD\s+\d+\s+directory\s+ready\s*$`)

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", "10.5.0.36", "reset", "--system-labels-to-wipe", "EPHEMERAL,ETCD", "--reboot").
		mustFail(t, `failed to reset: volume "ETCD" is not located`)

	if n.LastReset() != nil || !etcd.Bootstrapped() {
		t.Fatalf("the refused reset was recorded (%v) or lost etcd's data", n.LastReset())
	}
}
