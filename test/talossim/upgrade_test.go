package talossim

import (
	"context"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// wantVersion fails the test unless both the Version API and the runtime Version resource report tag.
func wantVersion(t *testing.T, c *client.Client, tag string) {
	t.Helper()

	ctx := testContext(t)

	ver, err := c.Version(ctx)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}

	if got := ver.GetMessages()[0].GetVersion().GetTag(); got != tag {
		t.Fatalf("Version tag = %s, want %s", got, tag)
	}

	res, err := safe.StateGetByID[*runtime.Version](ctx, c.COSI, "version")
	if err != nil {
		t.Fatalf("Version resource: %v", err)
	}

	if got := res.TypedSpec().Version; got != tag {
		t.Fatalf("Version resource = %s, want %s", got, tag)
	}
}

// upgrade calls the MachineService Upgrade with image and stage.
func upgrade(ctx context.Context, c *client.Client, image string, stage, force bool) (*machineapi.UpgradeResponse, error) {
	return c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image), client.WithUpgradeStage(stage), client.WithUpgradeForce(force))
}

func TestUpgradeNotInstalled(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := appliedNode(t, ctx, Options{InstallDelay: testTimeout * 10}, cl.cp, PhaseInstalling)

	_, err := upgrade(ctx, adminClient(t, n, cl), "siderolabs/installer:v1.13.1", false, true)
	wantCode(t, err, codes.FailedPrecondition, "Talos is not installed")
}

func TestUpgradeWorker(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := workerNode(t, cl, Options{})
	clients := roleClients(t, n, cl)

	wantVersion(t, admin, DefaultVersion)

	_, err := upgrade(ctx, clients[role.Operator], "siderolabs/installer:v1.13.1", false, false)
	wantDenied(t, err)

	for _, image := range []string{"siderolabs/installer", "siderolabs/installer:latest", "localhost:5000/installer", ""} {
		_, err = upgrade(ctx, admin, image, false, false)
		wantCode(t, err, codes.Unknown, "error validating installer image")
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning)

	resp, err := upgrade(ctx, admin, "siderolabs/installer:v1.13.1", false, false)
	if err != nil {
		t.Fatalf("Upgrade: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetAck() != "Upgrade request received" || got.GetActorId() == "" {
		t.Fatalf("Upgrade response = %v", got)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning, PhaseUpgrading, PhaseRebooting, PhaseRunning)
	wantVersion(t, adminClient(t, n, cl), "v1.13.1")
}

func TestUpgradeStaged(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := workerNode(t, cl, Options{})

	if _, err := upgrade(ctx, admin, "installer/abc:v1.14.0-alpha.1", true, false); err != nil {
		t.Fatalf("staged Upgrade: %v", err)
	}

	// Staging reboots at once; the new version is installed during that boot, without an upgrading stage.
	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning, PhaseRebooting, PhaseRunning)
	wantVersion(t, adminClient(t, n, cl), "v1.14.0-alpha.1")
}

func TestUpgradeStagedWaitsForNextBoot(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := workerNode(t, cl, Options{UpgradeDelay: testTimeout * 10})

	// An upgrade holds the sequence lock (long UpgradeDelay): a staged upgrade is recorded, but its reboot is
	// dropped; the old version keeps running until some reboot happens.
	if _, err := upgrade(ctx, admin, "siderolabs/installer:v1.13.1", false, false); err != nil {
		t.Fatalf("Upgrade: %v", err)
	}

	if _, err := upgrade(ctx, admin, "siderolabs/installer:v1.13.2", true, false); err != nil {
		t.Fatalf("staged Upgrade: %v", err)
	}

	wantVersion(t, admin, DefaultVersion)

	// Power-cycle: the staged image is what boots.
	if err := admin.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	if err := n.PowerOn(); err != nil {
		t.Fatal(err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning, PhaseUpgrading, PhaseShutdown, PhaseRunning)
	wantVersion(t, adminClient(t, n, cl), "v1.13.2")
}

func TestUpgradeControlPlaneEtcdChecks(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	_, err := upgrade(ctx, admin, "siderolabs/installer:v1.13.1", false, false)
	wantCode(t, err, codes.Unavailable, "failed to create etcd client: etcd cluster is not available")

	if _, err = upgrade(ctx, admin, "siderolabs/installer:v1.13.1", false, true); err != nil {
		t.Fatalf("forced Upgrade: %v", err)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseUpgrading, PhaseRebooting, PhaseRunning})...)
	wantVersion(t, adminClient(t, n, cl), "v1.13.1")
}
