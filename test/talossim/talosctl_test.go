package talossim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"go.yaml.in/yaml/v4"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/test/internal/proc"
)

// Fidelity checks against the official client: these tests run the real talosctl (built from the Talos
// module by hack/build-talosctl.sh) against simulated nodes and assert on what it prints.

// talosctlTimeout bounds one talosctl invocation; generous for -race on a 2-core machine.
const talosctlTimeout = 45 * time.Second

// talosctl returns the path of the talosctl binary: $ICHOR_TALOSCTL_BIN/talosctl, else built once per test
// binary with hack/build-talosctl.sh (a cold build takes a few minutes; later runs hit its cache).
// Call it before starting nodes or deriving test contexts so the build does not eat their timeouts.
func talosctl(t *testing.T) string {
	t.Helper()

	return talosctlNamed(t, proc.TalosctlOf(DefaultVersion))
}

// talosctl1_14 is the official talosctl v1.14.1, which hack/build-talosctl.sh builds beside v1.13.0.
func talosctl1_14(t *testing.T) string {
	t.Helper()

	return talosctlNamed(t, proc.TalosctlOf("v1.14.1"))
}

func talosctlNamed(t *testing.T, name string) string {
	t.Helper()

	dir, err := proc.TalosctlBinDir()
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("talosctl binary: %v", err)
	}

	return path
}

// talosctl1_13RebootDelay is how long a node that talosctl v1.13 reboots with --wait stays down. That
// talosctl resumes watching events one second after the reboot began, asking for new events only; a
// node back by then has already said it runs, and the watch waits for gRPC to drop the connection (about
// 40 s). Down longer, as a real node is, the node is unavailable then, so talosctl replays the new boot's
// events. (talosctl v1.14 resumes after the last event it saw and does not care.)
const talosctl1_13RebootDelay = 2 * time.Second

// talosctlResult is what one talosctl invocation printed and how it exited.
type talosctlResult struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r talosctlResult) String() string {
	return fmt.Sprintf("talosctl %s: err=%v\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(r.args, " "), r.err, r.stdout, r.stderr)
}

// runTalosctl runs talosctl with args in dir (a temp dir if empty), with HOME pointing at an empty temp dir
// and TALOSCONFIG unset so it never reads the user's ~/.talos.
func runTalosctl(t *testing.T, bin, dir string, args ...string) talosctlResult {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), talosctlTimeout)
	defer cancel()

	if dir == "" {
		dir = t.TempDir()
	}

	home := t.TempDir()

	var env []string

	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALOSCONFIG=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") {
			env = append(env, kv)
		}
	}

	var stdout, stderr bytes.Buffer

	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()

	return talosctlResult{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustSucceed fails the test unless the invocation exited 0.
func (r talosctlResult) mustSucceed(t *testing.T) talosctlResult {
	t.Helper()

	if r.err != nil {
		t.Fatalf("%v", r)
	}

	return r
}

// mustFail fails the test unless the invocation exited non-zero with every want in its stderr.
func (r talosctlResult) mustFail(t *testing.T, want ...string) talosctlResult {
	t.Helper()

	if r.err == nil {
		t.Fatalf("expected failure, got success\n%v", r)
	}

	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("stderr lacks %q\n%v", w, r)
		}
	}

	return r
}

// wantLine fails the test unless some line of out matches every pattern (regexps, in order).
func wantLine(t *testing.T, r talosctlResult, out string, patterns ...string) {
	t.Helper()

	re := regexp.MustCompile(strings.Join(patterns, `.*`))

	for line := range strings.SplitSeq(out, "\n") {
		if re.MatchString(line) {
			return
		}
	}

	t.Fatalf("no line matches %q\n%v", re, r)
}

// writeTalosconfig writes a talosconfig for the node's address with a client certificate for roles.
func writeTalosconfig(t *testing.T, n *Node, cl *testCluster, roles ...role.Role) string {
	t.Helper()

	cfg := clientconfig.NewConfig("sim", []string{n.Addr()}, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, roles...))
	path := filepath.Join(t.TempDir(), "talosconfig")

	if err := cfg.Save(path); err != nil {
		t.Fatalf("saving talosconfig: %v", err)
	}

	return path
}

func TestTalosctlMaintenance(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	ctx := testContext(t)
	cl := newCluster(t)
	n := startNode(t, simOptions())

	// In maintenance mode talosctl dials the --nodes themselves (no apid routing), so they carry the port.
	node := n.Addr()

	r := runTalosctl(t, bin, "", "get", "disks", "--insecure", "--nodes", node).mustSucceed(t)
	wantLine(t, r, r.stdout, `NODE`, `NAMESPACE`, `TYPE`, `ID`, `VERSION`, `SIZE`, `MODEL`, `SERIAL`)
	wantLine(t, r, r.stdout, `runtime`, `Disk`, `\bsda\b`, `22 GB`, `SIM DISK A`, `\bDA\b`)
	wantLine(t, r, r.stdout, `runtime`, `Disk`, `\bnvme0n1\b`, `537 GB`, `SIM NVME`, `\bNV\b`)

	r = runTalosctl(t, bin, "", "get", "systeminformation", "--insecure", "--nodes", node, "-o", "yaml").mustSucceed(t)
	wantLine(t, r, r.stdout, `^\s*uuid: `+regexp.QuoteMeta(simOptions().SystemUUID)+`$`)
	wantLine(t, r, r.stdout, `^\s*serialnumber: SER-0001$`)

	// Writes need the config: maintenance mode answers apply-config only.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cp.yaml"), cl.cp, 0o600); err != nil {
		t.Fatal(err)
	}

	// A wrong pin fails the TLS handshake; the node never sees the config.
	bogus := sha256.Sum256([]byte("not the node"))
	wrong := x509.Fingerprint(bogus[:]).String()
	runTalosctl(t, bin, dir, "apply-config", "--insecure", "--nodes", node, "--file", "cp.yaml", "--cert-fingerprint", wrong).
		mustFail(t, "leaf peer certificate doesn't match the provided fingerprints", wrong)

	if p := n.Phase(); p != PhaseMaintenance {
		t.Fatalf("after a mismatched apply-config the node is %s, want %s", p, PhaseMaintenance)
	}

	r = runTalosctl(t, bin, dir, "apply-config", "--insecure", "--nodes", node, "--file", "cp.yaml", "--cert-fingerprint", n.MaintenanceFingerprint()).mustSucceed(t)
	// Like machined, AUTO in maintenance resolves to NO_REBOOT: the install sequence reboots by itself.
	if !strings.Contains(r.stderr, "Applied configuration without a reboot") {
		t.Fatalf("apply-config did not report its mode\n%v", r)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning)
}

func TestTalosctlConfigured(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl := newCluster(t)
	etcd := &EtcdCluster{Name: "talosctl"}
	n, admin := bootstrappedNode(t, cl, Options{
		Hostname:  "cp-talosctl",
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.7/24")},
		Etcd:      etcd,
	})

	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	readerCfg := writeTalosconfig(t, n, cl, role.Reader)
	nodeIP := "10.5.0.7"

	// version: the Server section is the simulated node's.
	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "version").mustSucceed(t)

	_, server, ok := strings.Cut(r.stdout, "Server:")
	if !ok {
		t.Fatalf("no Server section\n%v", r)
	}

	wantLine(t, r, server, `^\s*Tag:\s+v1\.13\.0\s*$`)
	wantLine(t, r, server, `^\s*OS/Arch:\s+linux/`)

	// get nodeip: the address the node publishes.
	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "get", "nodeip").mustSucceed(t)
	wantLine(t, r, r.stdout, `^10\.5\.0\.7\s+k8s\s+NodeIP\s+kubelet\s+\d+\s*$`)

	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "get", "nodeip", "-o", "yaml").mustSucceed(t)
	wantLine(t, r, r.stdout, `^\s*-\s+10\.5\.0\.7\s*$`)

	// etcd snapshot: talosctl saves exactly the bytes the simulator serves, then reads the file back as an
	// etcd backend (etcdutl's snapshot status) and prints its hash, revision, key count and database size.
	if rev := etcd.AdvanceRevision(1233); rev != 1234 {
		t.Fatalf("revision = %d, want 1234", rev)
	}

	dir := t.TempDir()
	r = runTalosctl(t, bin, dir, "--talosconfig", adminCfg, "--nodes", nodeIP, "etcd", "snapshot", "db.snapshot").mustSucceed(t)
	wantLine(t, r, r.stdout, regexp.QuoteMeta(fmt.Sprintf(`etcd snapshot saved to "db.snapshot" (%d bytes)`, DefaultSnapshotSize)))

	got, err := os.ReadFile(filepath.Join(dir, "db.snapshot"))
	if err != nil {
		t.Fatal(err)
	}

	want, err := snapshot(testContext(t), admin)
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	computed, err := etcd.snapshot()
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got, want) || !bytes.Equal(got, computed) {
		t.Fatalf("talosctl saved %d bytes (sha256 %x), simulator serves %d (sha256 %x)", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}

	st := readSnapshotStatus(t, got)
	if st.revision != 1234 || st.totalSize != DefaultSnapshotSize-sha256.Size {
		t.Fatalf("snapshot status = %+v, want revision 1234 and total size %d", st, DefaultSnapshotSize-sha256.Size)
	}

	wantLine(t, r, r.stdout, "^"+regexp.QuoteMeta(fmt.Sprintf("snapshot info: hash %08x, revision 1234, total keys %d, total size %d",
		st.hash, st.totalKeys, DefaultSnapshotSize-sha256.Size))+"$")

	// A reader may look but not back up etcd or reboot.
	runTalosctl(t, bin, dir, "--talosconfig", readerCfg, "--nodes", nodeIP, "etcd", "snapshot", "denied.snapshot").
		mustFail(t, "PermissionDenied", "not authorized")

	if _, err := os.Stat(filepath.Join(dir, "denied.snapshot")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("denied snapshot left a file: %v", err)
	}

	runTalosctl(t, bin, dir, "--talosconfig", readerCfg, "--nodes", nodeIP, "reboot", "--wait=false").
		mustFail(t, "PermissionDenied", "not authorized")

	if p := n.Phase(); p != PhaseRunning {
		t.Fatalf("after a denied reboot the node is %s", p)
	}

	r = runTalosctl(t, bin, "", "--talosconfig", readerCfg, "--nodes", nodeIP, "get", "nodeip").mustSucceed(t)
	wantLine(t, r, r.stdout, `^10\.5\.0\.7\s+k8s\s+NodeIP\s+kubelet`)
}

// TestTalosctlRebootWait: `talosctl reboot` waits, as it does against Talos, for the node's events to
// say it is ready again and for its boot ID (read with `talosctl read`) to have changed.
func TestTalosctlRebootWait(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl := newCluster(t)
	n, _ := bootstrappedNode(t, cl, Options{
		Hostname:    "cp-reboot",
		Addresses:   []netip.Prefix{netip.MustParsePrefix("10.5.0.8/24")},
		Etcd:        &EtcdCluster{Name: "talosctl-reboot"},
		RebootDelay: talosctl1_13RebootDelay,
	})

	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	readerCfg := writeTalosconfig(t, n, cl, role.Reader)
	nodeIP := "10.5.0.8"

	before := n.BootID()
	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "read", bootIDPath).mustSucceed(t)
	if got := strings.TrimSpace(r.stdout); got != before {
		t.Fatalf("talosctl read %s = %q, want %q\n%v", bootIDPath, got, before, r)
	}

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "read", "/etc/shadow").
		mustFail(t, "NotFound", "no such file or directory")
	// Reading files is os:admin's alone.
	runTalosctl(t, bin, "", "--talosconfig", readerCfg, "--nodes", nodeIP, "read", bootIDPath).
		mustFail(t, "PermissionDenied")

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "reboot", "--wait", "--progress=plain").mustSucceed(t)

	after := n.BootID()
	if after == before || n.Phase() != PhaseRunning {
		t.Fatalf("after talosctl reboot --wait: boot ID %s (was %s), phase %s", after, before, n.Phase())
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning, PhaseRebooting, PhaseRunning)
}

// TestTalosctlUpgrade runs the official talosctl v1.13 upgrade against a control plane: it takes the
// LifecycleService path (ImageService.Pull, then LifecycleService.Upgrade with its exit code), then
// reboots and waits for the new boot, as it does against a real node. An image the registry does not
// serve fails at the pull, and an installer that fails (a v1.13 installer exits 1) fails the upgrade
// before the reboot; both leave the node as it was.
func TestTalosctlUpgrade(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl := newCluster(t)
	n, _ := bootstrappedNode(t, cl, Options{
		Hostname:    "cp-upgrade",
		Addresses:   []netip.Prefix{netip.MustParsePrefix("10.5.0.9/24")},
		Etcd:        &EtcdCluster{Name: "talosctl-upgrade"},
		RebootDelay: talosctl1_13RebootDelay,
		Registry:    NewRegistry("siderolabs/installer:v1.13.1", "siderolabs/installer:v1.13.2"),
	})

	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	nodeIP := "10.5.0.9"

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "upgrade", "--drain=false", "--wait", "--progress=plain",
		"--image", "siderolabs/installer:v1.13.9").mustFail(t, "error pulling upgrade image", "not found")

	if v := n.Version(); v != "v1.13.0" {
		t.Fatalf("after a failed pull the node runs %s", v)
	}

	if err := n.SetFaults(Faults{InstallerFails: map[string]string{"siderolabs/installer:v1.13.2": "failed to install bootloader: input/output error"}}); err != nil {
		t.Fatal(err)
	}

	before := n.BootID()
	r := runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "upgrade", "--drain=false", "--wait", "--progress=plain",
		"--image", "siderolabs/installer:v1.13.2").mustFail(t, "error during upgrade: node "+nodeIP+": upgrade failed with exit code 1")
	wantLine(t, r, r.stderr, regexp.QuoteMeta(nodeIP+": failed to install bootloader: input/output error"))

	if n.BootID() != before || n.Version() != "v1.13.0" {
		t.Fatalf("after a failed installer: boot ID %s (was %s), version %s", n.BootID(), before, n.Version())
	}

	runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", nodeIP, "upgrade", "--drain=false", "--wait", "--progress=plain",
		"--image", "siderolabs/installer:v1.13.1").mustSucceed(t)

	if after := n.BootID(); after == before || n.Version() != "v1.13.1" || n.Phase() != PhaseRunning {
		t.Fatalf("after talosctl upgrade --wait: boot ID %s (was %s), version %s, phase %s", after, before, n.Version(), n.Phase())
	}
}

// TestTalosctl1_14 runs the official talosctl v1.14.1 against a simulated v1.14.1 node with a config of
// the v1.14 contract: it installs it from maintenance mode, reads it back with its documents, applies
// a change (AUTO, which v1.14 never turns into a reboot) and finds that --mode=reboot is gone.
func TestTalosctl1_14(t *testing.T) {
	t.Parallel()

	bin := talosctl1_14(t)
	ctx := testContext(t)

	cl, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	opts := simOptions()
	opts.Version = "v1.14.1"
	n := startNode(t, opts)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cp.yaml"), cl.cp, 0o600); err != nil {
		t.Fatal(err)
	}

	r := runTalosctl(t, bin, dir, "apply-config", "--insecure", "--nodes", n.Addr(), "--file", "cp.yaml", "--cert-fingerprint", n.MaintenanceFingerprint()).mustSucceed(t)
	if !strings.Contains(r.stderr, "Applied configuration without a reboot") {
		t.Fatalf("apply-config did not report its mode\n%v", r)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	node := "10.5.0.2"

	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "version").mustSucceed(t)

	_, server, ok := strings.Cut(r.stdout, "Server:")
	if !ok {
		t.Fatalf("no Server section\n%v", r)
	}

	wantLine(t, r, server, `^\s*Tag:\s+v1\.14\.1\s*$`)

	// The config read back (the resource's spec, a string) carries the v1.14 documents.
	r = runTalosctl(t, bin, "", "--talosconfig", adminCfg, "--nodes", node, "get", "machineconfig", "-o", "yaml").mustSucceed(t)

	var res struct {
		Spec string `yaml:"spec"`
	}
	if err := yaml.NewDecoder(strings.NewReader(r.stdout)).Decode(&res); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}

	for _, kind := range []string{"KubeletConfig", "KubeAPIServerConfig", "KubeAPIServerCAConfig", "UnattendedInstallConfig"} {
		if !strings.Contains(res.Spec, "kind: "+kind+"\n") {
			t.Errorf("the config read back has no %s document\n%v", kind, r)
		}
	}

	// A change that takes effect at boot is applied live, and no reboot is asked for.
	changed := patch(t, cl.cp, envPatch)
	if err := os.WriteFile(filepath.Join(dir, "changed.yaml"), changed, 0o600); err != nil {
		t.Fatal(err)
	}

	r = runTalosctl(t, bin, dir, "--talosconfig", adminCfg, "--nodes", node, "apply-config", "--file", "changed.yaml").mustSucceed(t)
	if !strings.Contains(r.stderr, "Applied configuration without a reboot") {
		t.Fatalf("apply-config (auto) did not apply without a reboot\n%v", r)
	}

	runTalosctl(t, bin, dir, "--talosconfig", adminCfg, "--nodes", node, "apply-config", "--file", "changed.yaml", "--mode", "reboot").
		mustFail(t, `invalid argument "reboot" for "-m, --mode" flag: possible options are: auto, no-reboot, staged, try`)

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning)
}
