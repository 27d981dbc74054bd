package talossim

import (
	stdx509 "crypto/x509"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// simOptions is a node with two disks and two addresses, to check they are all reported.
func simOptions() Options {
	return Options{
		Hostname:     "sim-node-1",
		SystemUUID:   "8c6c2b3e-1f0a-4b7c-9d2e-3a4b5c6d7e8f",
		SystemSerial: "SER-0001",
		Disks: []Disk{
			{Path: "/dev/sda", Size: 20 << 30, Model: "SIM DISK A", Serial: "DA"},
			{Path: "/dev/nvme0n1", Size: 500 << 30, Model: "SIM NVME", Serial: "NV"},
		},
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.2/24"), netip.MustParsePrefix("fd00::2/64")},
	}
}

func TestMaintenanceReads(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	n := startNode(t, simOptions())
	c := pinnedClient(t, n, n.MaintenanceFingerprint())

	if n.Phase() != PhaseMaintenance {
		t.Fatalf("phase = %s", n.Phase())
	}

	ver, err := c.Version(ctx)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}

	msg := ver.GetMessages()[0]
	if msg.GetVersion().GetTag() != "v1.13.0" || msg.GetPlatform().GetName() != "metal" || msg.GetPlatform().GetMode() != "metal" {
		t.Fatalf("unexpected version %v", msg)
	}

	if msg.GetFeatures() != nil {
		t.Fatalf("maintenance Version must not report features, got %v", msg.GetFeatures())
	}

	host, err := c.MachineClient.Hostname(ctx, &emptypb.Empty{})
	if err != nil || host.GetMessages()[0].GetHostname() != "sim-node-1" {
		t.Fatalf("Hostname = %v, %v", host, err)
	}

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		t.Fatalf("SystemInformation: %v", err)
	}

	if si.TypedSpec().UUID != "8c6c2b3e-1f0a-4b7c-9d2e-3a4b5c6d7e8f" || si.TypedSpec().SerialNumber != "SER-0001" {
		t.Fatalf("SystemInformation = %+v", si.TypedSpec())
	}

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		t.Fatalf("Disks: %v", err)
	}

	var diskIDs []string
	for d := range disks.All() {
		diskIDs = append(diskIDs, d.Metadata().ID()+"="+d.TypedSpec().DevPath+"/"+d.TypedSpec().Model+"/"+d.TypedSpec().Serial)
	}

	if want := []string{"nvme0n1=/dev/nvme0n1/SIM NVME/NV", "sda=/dev/sda/SIM DISK A/DA"}; !slices.Equal(diskIDs, want) {
		t.Fatalf("disks = %v, want %v", diskIDs, want)
	}

	link, err := safe.StateGetByID[*network.LinkStatus](ctx, c.COSI, "eth0")
	if err != nil {
		t.Fatalf("LinkStatus: %v", err)
	}

	if link.TypedSpec().HardwareAddr.String() == "" || !link.TypedSpec().LinkState {
		t.Fatalf("LinkStatus = %+v", link.TypedSpec())
	}

	addrs, err := safe.StateListAll[*network.AddressStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("AddressStatus: %v", err)
	}

	var prefixes []string
	for a := range addrs.All() {
		prefixes = append(prefixes, a.TypedSpec().Address.String()+"@"+a.TypedSpec().LinkName)
	}

	if want := []string{"10.5.0.2/24@eth0", "fd00::2/64@eth0"}; !slices.Equal(prefixes, want) {
		t.Fatalf("addresses = %v, want %v", prefixes, want)
	}

	hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID)
	if err != nil || hs.TypedSpec().Hostname != "sim-node-1" {
		t.Fatalf("HostnameStatus = %v, %v", hs, err)
	}

	nodeIP, err := safe.StateGet[*k8s.NodeIP](ctx, c.COSI, k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil {
		t.Fatalf("NodeIP: %v", err)
	}

	if want := []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("fd00::2")}; !slices.Equal(nodeIP.TypedSpec().Addresses, want) {
		t.Fatalf("NodeIP = %v, want %v", nodeIP.TypedSpec().Addresses, want)
	}

	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, c.COSI, runtime.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtime.MachineStageMaintenance {
		t.Fatalf("MachineStatus = %v, %v", ms, err)
	}

	// Reader may not reboot, read sensitive resources, or write anything.
	wantCode(t, c.Reboot(ctx), codes.PermissionDenied, "not authorized")

	_, err = machineConfig(ctx, c, config.ActiveID)
	wantCode(t, err, codes.PermissionDenied, "not authorized")

	_, err = safe.StateListAll[*network.LinkSpec](ctx, c.COSI)
	wantCode(t, err, codes.PermissionDenied, "not authorized")

	wantWriteDenied(t, c.COSI.Create(ctx, k8s.NewNodeIP(k8s.NamespaceName, "extra")), "not authorized")

	_, err = c.COSI.Get(ctx, resource.NewMetadata(network.NamespaceName, "Bogus.talos.dev", "x", resource.VersionUndefined))
	wantCode(t, err, codes.PermissionDenied, `resource type "Bogus.talos.dev" is not supported`)

	_, err = c.COSI.Get(ctx, resource.NewMetadata("nope", network.LinkStatusType, "eth0", resource.VersionUndefined))
	wantCode(t, err, codes.PermissionDenied, `namespace "nope" is not supported`)

	// A reader-allowed method the simulator does not implement answers Unimplemented, not PermissionDenied.
	_, err = c.Memory(ctx)
	wantCode(t, err, codes.Unimplemented, "")

	if history := n.PhaseHistory(); !slices.Equal(history, []Phase{PhaseMaintenance}) {
		t.Fatalf("history = %v", history)
	}
}

func TestMaintenanceWrongFingerprint(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	n := startNode(t, Options{})
	other := startNode(t, Options{})

	if n.MaintenanceFingerprint() == other.MaintenanceFingerprint() {
		t.Fatal("two nodes share a maintenance fingerprint")
	}

	_, err := pinnedClient(t, n, other.MaintenanceFingerprint()).Version(ctx)
	wantCode(t, err, codes.Unavailable, "doesn't match the provided fingerprints")
}

func TestMaintenanceApplyInvalid(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := startNode(t, simOptions())
	fp := n.MaintenanceFingerprint()
	c := pinnedClient(t, n, fp)

	_, err := c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: []byte("machine: [not: valid")})
	wantCode(t, err, codes.InvalidArgument, "")

	noInstall := loadConfig(t, cl.cp)
	noInstall, err = noInstall.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		c.MachineConfig.MachineInstall = nil

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	b, err := noInstall.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	_, err = c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: b, Mode: machineapi.ApplyConfigurationRequest_AUTO})
	wantCode(t, err, codes.InvalidArgument, `install instructions are required in "metal" mode`)

	// An install disk selector that matches none of the node's disks fails runtime validation.
	noDisk := patch(t, cl.cp, "machine:\n  install:\n    disk: \"\"\n    diskSelector:\n      model: NO SUCH MODEL\n")

	_, err = c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: noDisk})
	wantCode(t, err, codes.InvalidArgument, "no disks matched the expression")

	if n.Phase() != PhaseMaintenance || n.MaintenanceFingerprint() != fp {
		t.Fatalf("node changed: phase %s, fingerprint %s (was %s)", n.Phase(), n.MaintenanceFingerprint(), fp)
	}

	// The same pinned connection still works.
	if _, err = c.Version(ctx); err != nil {
		t.Fatalf("Version after rejected applies: %v", err)
	}

	// A dry run in maintenance reports the install without doing it.
	resp, err := c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.cp, DryRun: true})
	if err != nil {
		t.Fatalf("dry-run apply: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT ||
		!strings.HasPrefix(got.GetModeDetails(), "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n") {
		t.Fatalf("dry-run response = %v", got)
	}

	wantHistory(t, n, PhaseMaintenance)
}

func TestInstallThenMutualTLS(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)

	opts := simOptions()
	opts.ListenAddress = "127.0.0.2:0" // the configured cert must carry the listen IP, not just loopback

	n := startNode(t, opts)
	maint := pinnedClient(t, n, n.MaintenanceFingerprint())

	// Name the machine through the HostnameConfig document instead of the generated "auto: stable".
	cp := []byte(strings.Replace(string(cl.cp), "kind: HostnameConfig\nauto: stable", "kind: HostnameConfig\nhostname: cp-1", 1))

	resp, err := maint.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cp})
	if err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT || got.GetModeDetails() != "Applied configuration without a reboot" {
		t.Fatalf("maintenance apply response = %v", got)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning)

	// Neither the old maintenance connection nor a fresh pinned one gets through any more.
	_, err = maint.Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	_, err = pinnedClient(t, n, n.MaintenanceFingerprint()).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	admin := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	ver, err := admin.Version(ctx)
	if err != nil {
		t.Fatalf("admin Version: %v", err)
	}

	if !ver.GetMessages()[0].GetFeatures().GetRbac() || ver.GetMessages()[0].GetVersion().GetTag() != "v1.13.0" {
		t.Fatalf("admin Version = %v", ver.GetMessages()[0])
	}

	mc := mustMachineConfig(t, admin, config.ActiveID)
	if mc.Config().Machine().Type() != machine.TypeControlPlane || mc.Config().K8sClusterConfig().ClusterName() != "sim" {
		t.Fatalf("active config: type %s, cluster %q", mc.Config().Machine().Type(), mc.Config().K8sClusterConfig().ClusterName())
	}

	host, err := admin.MachineClient.Hostname(ctx, &emptypb.Empty{})
	if err != nil || host.GetMessages()[0].GetHostname() != "cp-1" {
		t.Fatalf("Hostname = %v, %v", host, err)
	}

	nodename, err := safe.StateGetByID[*k8s.Nodename](ctx, admin.COSI, k8s.NodenameID)
	if err != nil || nodename.TypedSpec().Nodename != "cp-1" {
		t.Fatalf("Nodename = %v, %v", nodename, err)
	}

	mt, err := safe.StateGetByID[*config.MachineType](ctx, admin.COSI, config.MachineTypeID)
	if err != nil || mt.MachineType() != machine.TypeControlPlane {
		t.Fatalf("MachineType = %v, %v", mt, err)
	}

	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, admin.COSI, runtime.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtime.MachineStageRunning || !ms.TypedSpec().Status.Ready {
		t.Fatalf("MachineStatus = %v, %v", ms, err)
	}

	// Reader: read-only, no config access.
	reader := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Reader))

	if _, err = reader.Version(ctx); err != nil {
		t.Fatalf("reader Version: %v", err)
	}

	if _, err = safe.StateGet[*k8s.NodeIP](ctx, reader.COSI, k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID).Metadata()); err != nil {
		t.Fatalf("reader NodeIP: %v", err)
	}

	_, err = reader.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.cp, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT})
	wantCode(t, err, codes.PermissionDenied, "not authorized")

	_, err = machineConfig(ctx, reader, config.ActiveID)
	wantCode(t, err, codes.PermissionDenied, "not authorized")

	// Even admin cannot write resources.
	wantWriteDenied(t, admin.COSI.Create(ctx, k8s.NewNodeIP(k8s.NamespaceName, "extra")), "write access is not allowed")

	// Certificates the node must refuse.
	otherCA, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}

	foreign, err := secrets.NewAdminCertificateAndKey(time.Now(), x509.NewCertificateAndKeyFromCertificateAuthority(otherCA), role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	_, err = certClient(t, n, cl.bundle.Certs.OS.Crt, foreign).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	osCA, err := x509.NewCertificateAuthorityFromCertificateAndKey(cl.bundle.Certs.OS)
	if err != nil {
		t.Fatal(err)
	}

	dualUse, err := x509NewRoleCert(osCA, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth})
	if err != nil {
		t.Fatal(err)
	}

	_, err = certClient(t, n, cl.bundle.Certs.OS.Crt, dualUse).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	_, err = certClient(t, n, cl.bundle.Certs.OS.Crt, nil).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	// The maintenance identity survives the install (it is per node life).
	if n.MaintenanceFingerprint() == "" {
		t.Fatal("empty maintenance fingerprint")
	}
}

// x509NewRoleCert mints an os:admin client certificate from ca with the given extended key usages.
func x509NewRoleCert(ca *x509.CertificateAuthority, usages []stdx509.ExtKeyUsage) (*x509.PEMEncodedCertificateAndKey, error) {
	kp, err := x509.NewKeyPair(ca,
		x509.Organization(string(role.Admin)),
		x509.NotAfter(time.Now().Add(time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage(usages),
	)
	if err != nil {
		return nil, err
	}

	return x509.NewCertificateAndKeyFromKeyPair(kp), nil
}

func TestWorkerNeedsOSCA(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)

	// A worker's machine.ca has no key: with Options.OSCA (the trustd stand-in) the node serves mutual TLS.
	n := startNode(t, Options{OSCA: cl.bundle.Certs.OS})

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.worker}); err != nil {
		t.Fatalf("worker apply: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	admin := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	mt, err := safe.StateGetByID[*config.MachineType](ctx, admin.COSI, config.MachineTypeID)
	if err != nil || mt.MachineType() != machine.TypeWorker {
		t.Fatalf("MachineType = %v, %v", mt, err)
	}

	// Without it the node cannot mint a server certificate and handshakes fail.
	bare := startNode(t, Options{})

	if _, err = pinnedClient(t, bare, bare.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.worker}); err != nil {
		t.Fatalf("worker apply: %v", err)
	}

	if err = bare.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	_, err = certClient(t, bare, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin)).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")
}

func TestWorkerCertificateFromTrustd(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	trustd := NewTrustd()

	// A worker configured before any control plane: its API cannot serve yet, as on real nodes.
	w := startNode(t, Options{Trustd: trustd})

	if _, err := pinnedClient(t, w, w.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.worker}); err != nil {
		t.Fatalf("worker apply: %v", err)
	}

	if err := w.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	_, err := certClient(t, w, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin)).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	// Once a control plane of the cluster runs, the worker gets its certificate through trustd.
	appliedNode(t, ctx, Options{Trustd: trustd}, cl.cp, PhaseRunning)

	if _, err = certClient(t, w, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin)).Version(ctx); err != nil {
		t.Fatalf("worker Version after a control plane offered its CA: %v", err)
	}
}
