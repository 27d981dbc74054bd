package talossim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// wantSequenceFailed receives the events machined publishes when a sequence fails: its stop, then a
// fatal error saying msg.
func (e *eventStream) wantSequenceFailed(sequence, actorID, msg string) {
	e.t.Helper()

	_, ev := e.next()
	if seq, ok := ev.Payload.(*machineapi.SequenceEvent); !ok || seq.GetSequence() != sequence || seq.GetAction() != machineapi.SequenceEvent_STOP ||
		ev.ActorID != actorID {
		e.t.Fatalf("want %s sequence stop by %s, got %T %v (actor %s)", sequence, actorID, ev.Payload, ev.Payload, ev.ActorID)
	}

	_, ev = e.next()
	if seq, ok := ev.Payload.(*machineapi.SequenceEvent); !ok || seq.GetSequence() != sequence || seq.GetAction() != machineapi.SequenceEvent_NOOP ||
		seq.GetError().GetCode() != common.Code_FATAL || seq.GetError().GetMessage() != msg || ev.ActorID != actorID {
		e.t.Fatalf("want %s sequence error %q by %s, got %T %v (actor %s)", sequence, msg, actorID, ev.Payload, ev.Payload, ev.ActorID)
	}
}

// TestUpgradeInstallerFails: an installer that fails fails MachineService.Upgrade's sequence (the error
// names its exit code: 1 from a v1.13 installer, 7, an installation error, from a v1.14 one), and the node
// reboots into the version it ran. Its pre-flight check of the upgrade path fails it the same way; the
// installer's release, not the node's, has the exit code.
func TestUpgradeInstallerFails(t *testing.T) {
	t.Parallel()

	cl1_14, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, version, image string
		cl                   *testCluster
		msg                  string
	}{
		{"v1.13", "v1.13.0", "siderolabs/installer:v1.13.1", newCluster(t), `task "upgrade" failed: exit code 1`},
		{"v1.14", "v1.14.1", "factory.test/metal-installer/abc:v1.14.1", cl1_14, `task "upgrade" failed: exit code 7`},
		{"v1.14 node, v1.12 installer's pre-flight", "v1.14.1", "siderolabs/installer:v1.12.0", cl1_14, `task "upgrade" failed: exit code 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := testContext(t)
			n, admin := workerNode(t, tc.cl, Options{Version: tc.version})

			if err := n.SetFaults(Faults{InstallerFails: map[string]string{tc.image: "error writing the boot partition: input/output error"}}); err != nil {
				t.Fatal(err)
			}

			events := watchEvents(t, admin)

			resp, err := upgrade(ctx, admin, tc.image, false, false)
			if err != nil {
				t.Fatalf("Upgrade: %v", err)
			}

			actor := resp.GetMessages()[0].GetActorId()
			events.wantSequence("upgrade", actor)
			events.wantStage(machineapi.MachineStatusEvent_UPGRADING)

			// The worker's upgrade sequence runs the installer in its 13th phase on v1.14, its 9th on v1.13.
			phase := map[string]int{"v1.13.0": 9, "v1.14.1": 13}[tc.version]
			events.wantSequenceFailed("upgrade", actor, fmt.Sprintf("sequence failed: error running phase %d in upgrade sequence: task 1/1: failed, %s", phase, tc.msg))

			if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
				t.Fatal(err)
			}

			wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseUpgrading, PhaseRebooting, PhaseRunning})...)
			wantVersion(t, adminClient(t, n, tc.cl), tc.version)

			if img := n.RunningImage(); img != "" {
				t.Fatalf("the node runs the installer %q", img)
			}
		})
	}
}

// TestUpgradeStagedInstallerFails: a staged upgrade whose installer fails fails the boot that installs it;
// the node reboots into the version it ran, and the staged upgrade is gone.
func TestUpgradeStagedInstallerFails(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := workerNode(t, cl, Options{})
	image := "siderolabs/installer:v1.13.1"

	if err := n.SetFaults(Faults{UpgradeFails: "error writing the boot partition: input/output error"}); err != nil {
		t.Fatal(err)
	}

	if _, err := upgrade(ctx, admin, image, true, false); err != nil {
		t.Fatalf("staged Upgrade: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	admin = adminClient(t, n, cl)
	wantVersion(t, admin, DefaultVersion)
	n.ClearFaults()

	before := n.BootID()
	if err := admin.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if n.BootID() == before || n.Version() != DefaultVersion {
		t.Fatalf("after a reboot: boot ID %s (was %s), version %s", n.BootID(), before, n.Version())
	}
}

// TestInstallFailsTalos1_13: the installer of a config applied in maintenance mode fails the install
// sequence; the node reboots into maintenance mode without the config, and installs once applied again
// with an installer that works.
func TestInstallFailsTalos1_13(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	image := "siderolabs/installer:v1.13.0"
	cfg := patch(t, cl.cp, "machine:\n  install:\n    image: "+image+"\n")
	n := startNode(t, Options{})

	if err := n.SetFaults(Faults{InstallerFails: map[string]string{image: "failed to write the partition table: input/output error"}}); err != nil {
		t.Fatal(err)
	}

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(ctx, applyRequest(cfg)); err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseMaintenance)

	if n.SystemDisk() != "" || n.InstallImage() != "" {
		t.Fatalf("after a failed install: system disk %q, config's installer %q", n.SystemDisk(), n.InstallImage())
	}

	n.ClearFaults()

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(ctx, applyRequest(cfg)); err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if n.RunningImage() != image || n.Version() != "v1.13.0" {
		t.Fatalf("installed: %s from %q", n.Version(), n.RunningImage())
	}
}

// TestInstallFailsUnattended: a v1.14 config with an UnattendedInstallConfig is installed by Talos's
// UnattendedInstallController; a failed installer leaves the node up and installing, with the failure
// in the UnattendedInstallStatus, and the install is retried, here once the installer works.
func TestInstallFailsUnattended(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)

	cl, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	image := "factory.test/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1"
	cfg := patch(t, cl.cp, "apiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: "+image+
		"\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/sda\"\n")
	n := startNode(t, Options{Version: "v1.14.1"})

	if err := n.SetFaults(Faults{InstallerFails: map[string]string{image: "failed to write the partition table: input/output error"}}); err != nil {
		t.Fatal(err)
	}

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(ctx, applyRequest(cfg)); err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}

	admin := adminClient(t, n, cl)
	status := waitUnattended(t, admin, func(s *runtime.UnattendedInstallStatusSpec) bool {
		return s.Phase == runtime.UnattendedInstallPhaseFailed
	})

	if status.Image != image || status.Error != `task "upgrade" failed: exit code 7` {
		t.Fatalf("UnattendedInstallStatus = %+v", status)
	}

	if n.Phase() != PhaseInstalling || n.SystemDisk() != "" {
		t.Fatalf("after a failed unattended install: phase %s, system disk %q", n.Phase(), n.SystemDisk())
	}

	n.ClearFaults()

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning)

	status = waitUnattended(t, adminClient(t, n, cl), func(s *runtime.UnattendedInstallStatusSpec) bool { return true })
	if status.Phase != runtime.UnattendedInstallPhaseInstalled || status.Error != "" || n.RunningImage() != image {
		t.Fatalf("after the retry: UnattendedInstallStatus %+v, running %q", status, n.RunningImage())
	}
}

// waitUnattended watches the UnattendedInstallStatus until cond holds.
func waitUnattended(t *testing.T, c *client.Client, cond func(*runtime.UnattendedInstallStatusSpec) bool) *runtime.UnattendedInstallStatusSpec {
	t.Helper()

	var got *runtime.UnattendedInstallStatusSpec

	_, err := c.COSI.WatchFor(testContext(t),
		resource.NewMetadata(runtime.NamespaceName, runtime.UnattendedInstallStatusType, runtime.UnattendedInstallStatusID, resource.VersionUndefined),
		state.WithCondition(func(r resource.Resource) (bool, error) {
			s, ok := r.(*runtime.UnattendedInstallStatus)
			if ok && cond(s.TypedSpec()) {
				got = s.TypedSpec()

				return true, nil
			}

			return false, nil
		}))
	if err != nil {
		t.Fatalf("waiting for the UnattendedInstallStatus: %v", err)
	}

	return got
}

// TestLifecycleUpgradeExitCodes: LifecycleService.Upgrade streams the installer's output and exit code
// as its release has them: a v1.14 installer says an install error (7), where an older one exits 1 for
// any failure, its pre-flight check's too. The output ends with the installer's error.
func TestLifecycleUpgradeExitCodes(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	broken := "factory.test/metal-installer/abc:v1.14.1"
	n, c := workerNode(t, cl, Options{UpgradeDelay: time.Millisecond})

	if err := n.SetFaults(Faults{InstallerFails: map[string]string{broken: "error writing the boot partition: input/output error"}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		image string
		code  int32
		last  string
	}{
		{broken, 7, "error writing the boot partition: input/output error"},
		{"siderolabs/installer:v1.11.0", 1, "pre-flight checks failed: host version 1.13.0 is too new to downgrade to Talos 1.11.0"},
	} {
		if _, err := pull(ctx, c, tc.image); err != nil {
			t.Fatal(err)
		}

		msgs, code, err := lifecycleUpgrade(ctx, c, tc.image)
		if err != nil || code != tc.code || len(msgs) == 0 || !strings.HasPrefix(msgs[len(msgs)-1], tc.last) {
			t.Fatalf("%s: exit code %d (want %d), %v, %q", tc.image, code, tc.code, err, msgs)
		}
	}

	_, _, err := lifecycleUpgrade(ctx, c, "")
	wantCode(t, err, codes.InvalidArgument, "installer image name is required")

	if v := n.Version(); v != DefaultVersion {
		t.Fatalf("the node runs %s", v)
	}

	// A v1.14 installer's pre-flight check that refuses the host is an environment error (4). (A host
	// too old for v1.14 predates LifecycleService, so the installer is run directly.)
	n.mu.Lock()
	run := n.runInstallerLocked("siderolabs/installer:v1.14.1", "v1.11.0", true)
	old := n.runInstallerLocked("siderolabs/installer:v1.13.1", "v1.10.0", true)
	n.mu.Unlock()

	if run.code != 4 || run.last != "pre-flight checks failed: host version 1.11.0 is too old to upgrade to Talos 1.14.1" || old.code != 1 {
		t.Fatalf("v1.14 installer on v1.11.0: %d %q; v1.13 installer on v1.10.0: %d %q", run.code, run.last, old.code, old.last)
	}
}
