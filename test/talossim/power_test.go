package talossim

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

func TestShutdownAndPowerOn(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})
	clients := roleClients(t, n, cl)

	wantDenied(t, clients[role.Reader].Shutdown(ctx))
	wantDenied(t, clients[role.EtcdBackup].Shutdown(ctx))

	if err := n.PowerOn(); !errors.Is(err, ErrNotPoweredOff) {
		t.Fatalf("PowerOn while running = %v", err)
	}

	resp, err := clients[role.Operator].ShutdownWithResponse(ctx, client.WithShutdownForce(true))
	if err != nil {
		t.Fatalf("operator Shutdown: %v", err)
	}

	if resp.GetMessages()[0].GetActorId() == "" {
		t.Fatal("Shutdown returned no actor ID")
	}

	if err = n.WaitPhase(ctx, PhaseShutdown); err != nil {
		t.Fatal(err)
	}

	// Powered off: no API at all, for old and new connections alike.
	_, err = admin.Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	_, err = adminClient(t, n, cl).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	if err = n.PowerOn(); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseShutdown, PhaseRunning})...)

	if _, err = adminClient(t, n, cl).Version(ctx); err != nil {
		t.Fatalf("Version after PowerOn: %v", err)
	}
}

func TestShutdownTakesOverInstall(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := appliedNode(t, ctx, Options{InstallDelay: testTimeout * 10}, cl.cp, PhaseInstalling)

	// Powering off mid-install abandons it: the node boots its install media again.
	if err := adminClient(t, n, cl).Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseShutdown); err != nil {
		t.Fatal(err)
	}

	if err := n.PowerOn(); err != nil {
		t.Fatal(err)
	}

	if err := n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseShutdown, PhaseMaintenance)
}

func TestOperatorReboot(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, _ := installedNode(t, cl, Options{})
	clients := roleClients(t, n, cl)

	wantDenied(t, clients[role.Reader].Reboot(ctx))

	resp, err := clients[role.Operator].RebootWithResponse(ctx)
	if err != nil {
		t.Fatalf("operator Reboot: %v", err)
	}

	if resp.GetMessages()[0].GetActorId() == "" {
		t.Fatal("Reboot returned no actor ID")
	}

	// The handler enters PhaseRebooting before answering, so this waits for the boot.
	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseRebooting, PhaseRunning})...)
}
