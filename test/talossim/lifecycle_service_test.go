package talossim

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// lifecycleUpgrade pulls nothing and runs LifecycleService.Upgrade, returning its messages and exit code
// (-1 without one).
func lifecycleUpgrade(ctx context.Context, c *client.Client, image string) ([]string, int32, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
		Source: &machineapi.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return nil, -1, err
	}

	var msgs []string

	code := int32(-1)

	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, code, nil
		}

		if err != nil {
			return msgs, code, err
		}

		switch p := resp.GetProgress().GetResponse().(type) {
		case *machineapi.LifecycleServiceInstallProgress_Message:
			msgs = append(msgs, p.Message)
		case *machineapi.LifecycleServiceInstallProgress_ExitCode:
			code = p.ExitCode
		}
	}
}

// pull runs ImageService.Pull to its end and returns the image name it reports.
func pull(ctx context.Context, c *client.Client, ref string) (string, error) {
	stream, err := c.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{ImageRef: ref})
	if err != nil {
		return "", err
	}

	var name string

	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return name, nil
		}

		if err != nil {
			return name, err
		}

		if n := resp.GetName(); n != "" {
			name = n
		}
	}
}

func TestLifecycleUpgradeInstallsForTheNextBoot(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, c := workerNode(t, cl, Options{UpgradeDelay: 50 * time.Millisecond, RebootDelay: 50 * time.Millisecond})

	// The installer must be in the node's image store first.
	_, code, err := lifecycleUpgrade(ctx, c, "siderolabs/installer:v1.13.1")
	wantCode(t, err, codes.Internal, "not found in containerd store")

	if code != -1 {
		t.Fatalf("exit code %d without an installer", code)
	}

	if name, err := pull(ctx, c, "siderolabs/installer:v1.13.1"); err != nil || name != "siderolabs/installer:v1.13.1" {
		t.Fatalf("Pull = %q, %v", name, err)
	}

	msgs, code, err := lifecycleUpgrade(ctx, c, "siderolabs/installer:v1.13.1")
	if err != nil || code != 0 {
		t.Fatalf("Upgrade: exit code %d, %v; %q", code, err, msgs)
	}

	// Nothing reboots: the old version runs until the next boot.
	if v, p := n.Version(), n.Phase(); v != "v1.13.0" || p != PhaseRunning {
		t.Fatalf("after the upgrade call: version %s, phase %s", v, p)
	}

	before := n.BootID()
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the new boot", func() bool { return n.BootID() != before && n.Phase() == PhaseRunning })

	if v := n.Version(); v != "v1.13.1" {
		t.Fatalf("after the reboot the node runs %s", v)
	}
}

func TestLifecycleUpgradeRefusals(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, c := workerNode(t, cl, Options{UpgradeDelay: time.Minute, Registry: NewRegistry("siderolabs/installer:v1.11.0", "siderolabs/installer:v1.13.2")})

	// A downgrade the installer's preflight refuses: exit code 1, with the reason.
	if _, err := pull(ctx, c, "siderolabs/installer:v1.11.0"); err != nil {
		t.Fatal(err)
	}

	msgs, code, err := lifecycleUpgrade(ctx, c, "siderolabs/installer:v1.11.0")
	if err != nil || code != 1 || !strings.Contains(strings.Join(msgs, "\n"), "too new to downgrade") {
		t.Fatalf("downgrade: exit code %d, %v, %q", code, err, msgs)
	}

	// A reference the registry does not serve does not pull.
	_, err = pull(ctx, c, "siderolabs/installer:v1.13.3")
	wantCode(t, err, codes.NotFound, "not found")

	// A failing installer exits 1 and installs nothing.
	if err := n.SetFaults(Faults{UpgradeFails: "the system disk is read-only"}); err != nil {
		t.Fatal(err)
	}

	if _, err := pull(ctx, c, "siderolabs/installer:v1.13.2"); err != nil {
		t.Fatal(err)
	}

	msgs, code, err = lifecycleUpgrade(ctx, c, "siderolabs/installer:v1.13.2")
	if err != nil || code != 1 || !strings.Contains(strings.Join(msgs, "\n"), "read-only") {
		t.Fatalf("failing installer: exit code %d, %v, %q", code, err, msgs)
	}

	if err := n.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}

	// One install or upgrade at a time: a second call meets FailedPrecondition while the first runs.
	first, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err := c.LifecycleClient.Upgrade(first, &machineapi.LifecycleServiceUpgradeRequest{
		Source: &machineapi.InstallArtifactsSource{ImageName: "siderolabs/installer:v1.13.2"},
	})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := stream.Recv(); err != nil { // the first message: the installer runs
		t.Fatal(err)
	}

	_, _, err = lifecycleUpgrade(ctx, c, "siderolabs/installer:v1.13.2")
	wantCode(t, err, codes.FailedPrecondition, "already in progress")

	// Cancelling the stream kills the installer: nothing was written.
	cancel()
	waitFor(t, "the installer to stop", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()

		return !n.lifecycleBusy
	})

	n.mu.Lock()
	installed := n.sw.installed
	n.mu.Unlock()

	if installed != "v1.13.0" {
		t.Fatalf("a killed installer left %s installed", installed)
	}
}

// waitFor polls cond until it holds, failing the test at its deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}

		time.Sleep(10 * time.Millisecond)
	}
}
