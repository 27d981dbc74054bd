package talossim

import (
	"bytes"
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
)

// setFaults is SetFaults failing the test on error.
func setFaults(t *testing.T, n *Node, f Faults) {
	t.Helper()

	if err := n.SetFaults(f); err != nil {
		t.Fatalf("SetFaults(%+v): %v", f, err)
	}
}

// mustVersion fails the test unless a Version call through c succeeds.
func mustVersion(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()

	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("Version: %v", err)
	}
}

func TestFaultUnreachable(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	n := startNode(t, Options{})
	fp := n.MaintenanceFingerprint()
	c := pinnedClient(t, n, fp)

	mustVersion(t, ctx, c)

	events, err := c.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}

	if _, err = events.Recv(); err != nil {
		t.Fatalf("Events Recv: %v", err)
	}

	setFaults(t, n, Faults{Unreachable: true})

	_, err = events.Recv()
	wantCode(t, err, codes.Unavailable, "") // the established stream is cut

	_, err = c.Version(ctx)
	wantCode(t, err, codes.Unavailable, "") // so is the client's connection, and reconnecting fails

	_, err = pinnedClient(t, n, fp).Version(ctx)
	wantCode(t, err, codes.Unavailable, "") // and so do new clients

	if p := n.Phase(); p != PhaseMaintenance {
		t.Fatalf("phase = %s while unreachable", p)
	}

	n.ClearFaults()

	if got := n.MaintenanceFingerprint(); got != fp {
		t.Fatalf("fingerprint changed from %s to %s", fp, got)
	}

	mustVersion(t, ctx, pinnedClient(t, n, fp))
	wantHistory(t, n, PhaseMaintenance)
}

func TestFaultSlow(t *testing.T) {
	t.Parallel()

	const (
		slow  = 300 * time.Millisecond
		short = 30 * time.Millisecond
	)

	ctx := testContext(t)
	n := startNode(t, Options{})
	c := pinnedClient(t, n, n.MaintenanceFingerprint())

	mustVersion(t, ctx, c) // the connection is up: only the fault can make the next calls slow

	setFaults(t, n, Faults{Slow: slow})

	shortCtx, cancel := context.WithTimeout(ctx, short)
	_, err := c.Version(shortCtx)

	cancel()
	wantCode(t, err, codes.DeadlineExceeded, "")

	shortCtx, cancel = context.WithTimeout(ctx, short)
	events, err := c.Events(shortCtx)
	err = recvErr(events, err)

	cancel()
	wantCode(t, err, codes.DeadlineExceeded, "")

	start := time.Now()

	mustVersion(t, ctx, c)

	if elapsed := time.Since(start); elapsed < slow {
		t.Fatalf("Version answered after %s, before the %s delay", elapsed, slow)
	}

	start = time.Now()

	events, err = c.Events(ctx)
	if err = recvErr(events, err); err != nil {
		t.Fatalf("Events: %v", err)
	}

	if elapsed := time.Since(start); elapsed < slow {
		t.Fatalf("Events started after %s, before the %s delay", elapsed, slow)
	}

	if got := n.Faults(); got.Slow != slow {
		t.Fatalf("Faults() = %+v", got)
	}

	n.ClearFaults()
	mustVersion(t, ctx, c)
}

func TestFaultImpostor(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := startNode(t, Options{})
	fp := n.MaintenanceFingerprint()
	pinned := pinnedClient(t, n, fp)

	mustVersion(t, ctx, pinned)

	setFaults(t, n, Faults{Impostor: true})

	_, err := pinned.Version(ctx)
	wantCode(t, err, codes.Unavailable, "") // its connection was cut: the address changed hands

	_, err = pinnedClient(t, n, fp).Version(ctx)
	wantCode(t, err, codes.Unavailable, "doesn't match the provided fingerprints")

	// A client that does not pin talks to the impostor and gets its config "applied".
	var (
		mu   sync.Mutex
		seen []string
	)

	unpinned := newClient(t, n, &tls.Config{ //nolint:gosec // the point is to skip verification
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			defer mu.Unlock()

			seen = append(seen, x509.SPKIFingerprint(cs.PeerCertificates[0]).String())

			return nil
		},
	})

	if _, err = unpinned.ApplyConfiguration(ctx, applyRequest(cl.cp)); err != nil {
		t.Fatalf("ApplyConfiguration on the impostor: %v", err)
	}

	mu.Lock()
	if len(seen) == 0 || slices.Contains(seen, fp) {
		t.Fatalf("unpinned client saw fingerprints %v, want the impostor's (not %s)", seen, fp)
	}
	mu.Unlock()

	if got := n.ImpostorConfigs(); len(got) != 1 || !bytes.Equal(got[0], cl.cp) {
		t.Fatalf("impostor received %d configs, want exactly the applied one", len(got))
	}

	if p := n.Phase(); p != PhaseMaintenance {
		t.Fatalf("real node phase = %s after the impostor took a config", p)
	}

	n.ClearFaults()

	if got := n.MaintenanceFingerprint(); got != fp {
		t.Fatalf("fingerprint changed from %s to %s", fp, got)
	}

	// The real node answers its pinned clients again and was never configured: it still takes a config.
	realClient := pinnedClient(t, n, fp)
	if _, err = realClient.ApplyConfiguration(ctx, applyRequest(cl.cp)); err != nil {
		t.Fatalf("ApplyConfiguration on the real node: %v", err)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, installedHistory...)

	if got := len(n.ImpostorConfigs()); got != 1 {
		t.Fatalf("impostor configs = %d after clearing, want 1", got)
	}
}

func TestFaultCrashApplyKeepsConfig(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	setFaults(t, n, Faults{CrashCalls: 1, CrashMethod: "ApplyConfiguration"})

	mustVersion(t, ctx, admin) // other methods are not affected

	req := &machineapi.ApplyConfigurationRequest{Data: patch(t, cl.cp, kubeletPatch), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}

	_, err := admin.ApplyConfiguration(ctx, req)
	wantCode(t, err, codes.Unavailable, "")

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, append(slices.Clone(installedHistory), PhaseRebooting, PhaseRunning)...)

	if left := n.Faults().CrashCalls; left != 0 {
		t.Fatalf("CrashCalls left = %d, want 0", left)
	}

	after := adminClient(t, n, cl)

	for _, id := range []string{config.ActiveID, config.PersistentID} {
		if got := kubeletMaxPods(mustMachineConfig(t, after, id)); got != "" {
			t.Fatalf("%s max-pods = %q after a crashed apply, want the old config", id, got)
		}
	}

	// The crash was one-shot: the same apply now goes through.
	if _, err = after.ApplyConfiguration(ctx, req); err != nil {
		t.Fatalf("ApplyConfiguration after the crash: %v", err)
	}

	if got := kubeletMaxPods(mustMachineConfig(t, after, config.ActiveID)); got != "250" {
		t.Fatalf("max-pods = %q after the retried apply", got)
	}
}

func TestFaultCrashStreamInMaintenance(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	n := startNode(t, Options{})
	fp := n.MaintenanceFingerprint()
	c := pinnedClient(t, n, fp)

	setFaults(t, n, Faults{CrashCalls: 1, CrashMethod: "/machine.MachineService/Events"})

	events, err := c.Events(ctx)
	wantCode(t, recvErr(events, err), codes.Unavailable, "")

	if err = n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseRebooting, PhaseMaintenance)

	events, err = pinnedClient(t, n, fp).Events(ctx)
	if err = recvErr(events, err); err != nil {
		t.Fatalf("Events after the crash: %v", err)
	}
}
