package talossim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// Patches used across the apply-mode tests: kubelet args apply immediately, machine.env needs a reboot.
const (
	kubeletPatch = "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"250\"\n"
	envPatch     = "machine:\n  env:\n    SIM_ENV: \"1\"\n"
)

// kubeletMaxPods returns the max-pods kubelet extra arg of a MachineConfig resource.
func kubeletMaxPods(mc *config.MachineConfig) string {
	return strings.Join(mc.Config().K8sKubeletConfig().ExtraArgs()["max-pods"], ",")
}

// simEnv returns the SIM_ENV machine.env value of a MachineConfig resource.
func simEnv(mc *config.MachineConfig) string {
	return mc.Config().Machine().Env()["SIM_ENV"]
}

// installedHistory is the phase history of a node right after installedNode.
var installedHistory = []Phase{PhaseMaintenance, PhaseInstalling, PhaseRebooting, PhaseRunning}

func TestApplyNoRebootImmediate(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, kubeletPatch), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	})
	if err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT || got.GetModeDetails() != "Applied configuration without a reboot" {
		t.Fatalf("response = %v", got)
	}

	for _, id := range []string{config.ActiveID, config.PersistentID} {
		if got := kubeletMaxPods(mustMachineConfig(t, admin, id)); got != "250" {
			t.Fatalf("%s max-pods = %q", id, got)
		}
	}

	wantHistory(t, n, installedHistory...)
}

func TestApplyNoRebootNeedsReboot(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	for _, mode := range []machineapi.ApplyConfigurationRequest_Mode{machineapi.ApplyConfigurationRequest_NO_REBOOT, machineapi.ApplyConfigurationRequest_TRY} {
		_, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: patch(t, cl.cp, envPatch), Mode: mode})
		wantCode(t, err, codes.InvalidArgument, "this config change can't be applied in immediate mode\ndiff:\n")
		wantCode(t, err, codes.InvalidArgument, "SIM_ENV")
	}

	if got := simEnv(mustMachineConfig(t, admin, config.ActiveID)); got != "" {
		t.Fatalf("env applied despite refusal: %q", got)
	}

	wantHistory(t, n, installedHistory...)
}

func TestApplyAutoResolves(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	// Immediate-safe change: AUTO → NO_REBOOT.
	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, kubeletPatch), Mode: machineapi.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		t.Fatalf("AUTO kubelet: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT || got.GetModeDetails() != "Applied configuration without a reboot" {
		t.Fatalf("AUTO kubelet response = %v", got)
	}

	wantHistory(t, n, installedHistory...)

	// Reboot-requiring change: AUTO → REBOOT, the API goes down and comes back with the new config.
	resp, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, envPatch), Mode: machineapi.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		t.Fatalf("AUTO env: %v", err)
	}

	got := resp.GetMessages()[0]
	if got.GetMode() != machineapi.ApplyConfigurationRequest_REBOOT ||
		!strings.HasPrefix(got.GetModeDetails(), "Applied configuration with a reboot: this config change can't be applied in immediate mode\ndiff:\n") {
		t.Fatalf("AUTO env response = %v", got)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseRebooting, PhaseRunning})...)

	// The old connection was cut by the reboot; a new client sees the rebooted node.
	after := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	mc := mustMachineConfig(t, after, config.ActiveID)
	if simEnv(mc) != "1" || kubeletMaxPods(mc) != "" {
		t.Fatalf("after reboot: env %q, max-pods %q", simEnv(mc), kubeletMaxPods(mc))
	}
}

func TestRebootingAPIUnavailable(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := startNode(t, Options{RebootDelay: time.Hour})
	maint := pinnedClient(t, n, n.MaintenanceFingerprint())

	if _, err := maint.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.cp}); err != nil {
		t.Fatalf("maintenance apply: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRebooting); err != nil {
		t.Fatal(err)
	}

	_, err := maint.Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	_, err = certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin)).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")

	_, err = pinnedClient(t, n, n.MaintenanceFingerprint()).Version(ctx)
	wantCode(t, err, codes.Unavailable, "")
}

func TestApplyStaged(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, envPatch), Mode: machineapi.ApplyConfigurationRequest_STAGED,
	})
	if err != nil {
		t.Fatalf("STAGED: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_STAGED || got.GetModeDetails() != "Staged configuration to be applied after the next reboot" {
		t.Fatalf("STAGED response = %v", got)
	}

	if got := simEnv(mustMachineConfig(t, admin, config.ActiveID)); got != "" {
		t.Fatalf("staged config became active: env %q", got)
	}

	if got := simEnv(mustMachineConfig(t, admin, config.PersistentID)); got != "1" {
		t.Fatalf("staged config not persisted: env %q", got)
	}

	wantHistory(t, n, installedHistory...)

	// The staged config becomes active at the next reboot.
	if err = admin.Reboot(ctx); err != nil {
		t.Fatalf("Reboot: %v", err)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseRebooting, PhaseRunning})...)

	after := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))
	if got := simEnv(mustMachineConfig(t, after, config.ActiveID)); got != "1" {
		t.Fatalf("after reboot: env %q", got)
	}
}

func TestApplyTryReverts(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data:           patch(t, cl.cp, kubeletPatch),
		Mode:           machineapi.ApplyConfigurationRequest_TRY,
		TryModeTimeout: durationpb.New(500 * time.Millisecond),
	})
	if err != nil {
		t.Fatalf("TRY: %v", err)
	}

	want := "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in 500ms"
	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_TRY || got.GetModeDetails() != want {
		t.Fatalf("TRY response = %v", got)
	}

	// Applied to the running config only, never persisted; then reverted when the timeout fires.
	waitMachineConfig(t, admin, config.ActiveID, func(mc *config.MachineConfig) bool { return kubeletMaxPods(mc) == "250" })

	if got := kubeletMaxPods(mustMachineConfig(t, admin, config.PersistentID)); got != "" {
		t.Fatalf("TRY config was persisted: max-pods %q", got)
	}

	waitMachineConfig(t, admin, config.ActiveID, func(mc *config.MachineConfig) bool { return kubeletMaxPods(mc) == "" })

	wantHistory(t, n, installedHistory...)
}

func TestApplyTryCancelledByLaterApply(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	_, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, kubeletPatch), Mode: machineapi.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(time.Hour),
	})
	if err != nil {
		t.Fatalf("TRY: %v", err)
	}

	n.mu.Lock()
	armed := n.rollback != nil
	n.mu.Unlock()

	if !armed {
		t.Fatal("TRY did not arm a rollback")
	}

	if _, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, kubeletPatch), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	}); err != nil {
		t.Fatalf("NO_REBOOT: %v", err)
	}

	n.mu.Lock()
	armed = n.rollback != nil
	n.mu.Unlock()

	if armed {
		t.Fatal("a later non-TRY apply must cancel the pending rollback")
	}

	if got := kubeletMaxPods(mustMachineConfig(t, admin, config.PersistentID)); got != "250" {
		t.Fatalf("persisted max-pods = %q", got)
	}
}

func TestApplyDryRun(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	before := mustMachineConfig(t, admin, config.ActiveID).Metadata().Version()

	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, envPatch), Mode: machineapi.ApplyConfigurationRequest_AUTO, DryRun: true,
	})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}

	got := resp.GetMessages()[0]
	if got.GetMode() != machineapi.ApplyConfigurationRequest_REBOOT ||
		!strings.HasPrefix(got.GetModeDetails(), "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\nConfig diff:\n\n") ||
		!strings.Contains(got.GetModeDetails(), "+    env:") || len(got.GetWarnings()) != 0 {
		t.Fatalf("dry-run response = %q %v", got.GetModeDetails(), got.GetMode())
	}

	resp, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.cp, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT, DryRun: true})
	if err != nil {
		t.Fatalf("no-op dry run: %v", err)
	}

	if got := resp.GetMessages()[0].GetModeDetails(); !strings.HasSuffix(got, "Config diff:\n\nNo changes.") {
		t.Fatalf("no-op dry-run details = %q", got)
	}

	for _, id := range []string{config.ActiveID, config.PersistentID} {
		mc := mustMachineConfig(t, admin, id)
		if simEnv(mc) != "" {
			t.Fatalf("dry run changed %s", id)
		}

		if id == config.ActiveID && !mc.Metadata().Version().Equal(before) {
			t.Fatalf("dry run rewrote the active config: version %s → %s", before, mc.Metadata().Version())
		}
	}

	wantHistory(t, n, installedHistory...)
}

func TestApplyConfiguredRequiresV1Alpha1(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	_, admin := installedNode(t, cl, Options{})

	_, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: []byte("apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: only-a-hostname\n"),
		Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	})
	wantCode(t, err, codes.InvalidArgument, "doesn't contain v1alpha1 config")
}

// TestApplyKubeletDocumentNeedsTalos1_14 checks that the standalone KubeletConfig document is
// refused by a v1.13 node, as the document is unknown there, and taken by a v1.14 node, whose
// kubelet then reads its settings from it.
func TestApplyKubeletDocumentNeedsTalos1_14(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	withDocument := kubeletDocumentLayout(t, patch(t, cl.worker, serverTLSBootstrapPatch))

	old := startNode(t, Options{})
	_, err := pinnedClient(t, old, old.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: withDocument})
	wantCode(t, err, codes.InvalidArgument, `"KubeletConfig" "v1alpha1": not registered`)

	current := startNode(t, Options{Version: "v1.14.0"})
	if _, err := pinnedClient(t, current, current.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: withDocument}); err != nil {
		t.Fatalf("v1.14 node refused the KubeletConfig document: %v", err)
	}

	current.mu.Lock()
	kubelet := current.active.K8sKubeletConfig()
	current.mu.Unlock()

	if _, fromDocument := kubelet.(*k8s.KubeletConfigV1Alpha1); !fromDocument ||
		kubelet.ExtraConfig()["serverTLSBootstrap"] != true || kubelet.Image() == "" {
		t.Fatalf("the node's kubelet settings = %#v, want the document's", kubelet)
	}
}

// TestApplyOnTalos1_14 holds a v1.14 node to v1.14's ApplyConfiguration: the
// REBOOT mode is refused, AUTO never reboots, and a change that only takes
// effect at boot is applied live, to be in effect from the next boot.
func TestApplyOnTalos1_14(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{Version: "v1.14.1"})

	_, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, envPatch), Mode: machineapi.ApplyConfigurationRequest_REBOOT, //nolint:staticcheck // what v1.14 refuses
	})
	wantCode(t, err, codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")

	resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: patch(t, cl.cp, envPatch), Mode: machineapi.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		t.Fatalf("AUTO env: %v", err)
	}

	if got := resp.GetMessages()[0]; got.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT || got.GetModeDetails() != "Applied configuration without a reboot" {
		t.Fatalf("AUTO env response = %v", got)
	}

	if got := simEnv(mustMachineConfig(t, admin, config.ActiveID)); got != "1" {
		t.Fatalf("env after AUTO: %q", got)
	}

	wantHistory(t, n, installedHistory...)
}
