package talossim

import (
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

func TestResetGracefulToMaintenance(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	cluster := &EtcdCluster{}

	bootstrappedNode(t, cl, Options{Hostname: "keeper", Etcd: cluster})
	n, admin := installedNode(t, cl, Options{Hostname: "resetme", Etcd: cluster, Version: "v1.13.0"})
	clients := roleClients(t, n, cl)

	if len(cluster.Members()) != 2 {
		t.Fatalf("members before reset = %+v", cluster.Members())
	}

	req := &machineapi.ResetRequest{Graceful: true, Reboot: true, Mode: machineapi.ResetRequest_ALL}

	wantDenied(t, clients[role.Operator].ResetGeneric(ctx, req))
	wantDenied(t, clients[role.Reader].ResetGeneric(ctx, req))

	if n.LastReset() != nil {
		t.Fatal("denied resets were recorded")
	}

	oldFingerprint := n.MaintenanceFingerprint()

	resp, err := admin.ResetGenericWithResponse(ctx, req)
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}

	if resp.GetMessages()[0].GetActorId() == "" {
		t.Fatal("Reset returned no actor ID")
	}

	if got := n.LastReset(); !proto.Equal(got, req) {
		t.Fatalf("LastReset = %v, want %v", got, req)
	}

	if err = n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseResetting, PhaseRebooting, PhaseMaintenance})...)

	// Graceful: the member left etcd before the wipe; the other member leads alone.
	if got := cluster.Members(); len(got) != 1 || got[0].Hostname != "keeper" || cluster.Leader() != got[0].ID {
		t.Fatalf("members after graceful reset = %+v", got)
	}

	// A new machine: new maintenance certificate, no config, no machine type.
	newFingerprint := n.MaintenanceFingerprint()
	if newFingerprint == oldFingerprint {
		t.Fatal("maintenance fingerprint unchanged by reset")
	}

	_, err = pinnedClient(t, n, oldFingerprint).Version(ctx)
	wantCode(t, err, codes.Unavailable, "doesn't match the provided fingerprints")

	maint := pinnedClient(t, n, newFingerprint)

	ver, err := maint.Version(ctx)
	if err != nil || ver.GetMessages()[0].GetFeatures() != nil {
		t.Fatalf("maintenance Version after reset = %v, %v", ver, err)
	}

	_, err = safe.StateGetByID[*config.MachineType](ctx, maint.COSI, config.MachineTypeID)
	if !state.IsNotFoundError(err) {
		t.Fatalf("MachineType after reset: %v", err)
	}

	for _, id := range []string{config.ActiveID, config.PersistentID} {
		if _, err = safe.StateGetByID[*config.MachineConfig](ctx, n.st, id); !state.IsNotFoundError(err) {
			t.Fatalf("MachineConfig %s after reset: %v", id, err)
		}
	}

	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, maint.COSI, runtime.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtime.MachineStageMaintenance {
		t.Fatalf("MachineStatus after reset = %v, %v", ms, err)
	}

	// The node can be installed again with the new fingerprint and rejoins etcd with a new member ID.
	if _, err = maint.ApplyConfiguration(ctx, applyRequest(cl.cp)); err != nil {
		t.Fatalf("re-install: %v", err)
	}

	if err = n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if got := cluster.Members(); len(got) != 2 || got[1].Hostname != "resetme" || got[1].ID != memberIDFor(n.opts.SystemUUID, 2) {
		t.Fatalf("members after re-install = %+v", got)
	}
}

func TestResetWithoutRebootPowersOff(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	cluster := &EtcdCluster{}
	n, admin := bootstrappedNode(t, cl, Options{Etcd: cluster})

	// talosctl reset defaults: graceful, no reboot, wipe everything.
	if err := admin.Reset(ctx, false, false); err != nil {
		t.Fatalf("Reset: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseShutdown); err != nil {
		t.Fatal(err)
	}

	// Not graceful: the member stays listed in the cluster although its data is gone.
	if got := cluster.Members(); len(got) != 1 {
		t.Fatalf("members after non-graceful reset = %+v", got)
	}

	if err := n.PowerOn(); err != nil {
		t.Fatal(err)
	}

	if err := n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	wantHistory(t, n, slices.Concat(installedHistory, []Phase{PhaseResetting, PhaseShutdown, PhaseMaintenance})...)

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).Version(ctx); err != nil {
		t.Fatalf("maintenance Version after power on: %v", err)
	}
}

func TestResetValidationAndModes(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, simOptions())

	for _, tc := range []struct {
		req *machineapi.ResetRequest
		msg string
	}{
		{&machineapi.ResetRequest{Mode: machineapi.ResetRequest_SYSTEM_DISK, UserDisksToWipe: []string{"/dev/nvme0n1"}},
			"wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter"},
		{&machineapi.ResetRequest{Mode: machineapi.ResetRequest_USER_DISKS, SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "STATE", Wipe: true}}},
			"wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter"},
		{&machineapi.ResetRequest{UserDisksToWipe: []string{"/dev/sdz"}}, "device /dev/sdz wasn't found"},
		{&machineapi.ResetRequest{UserDisksToWipe: []string{"/dev/sda"}}, "device /dev/sda is the system disk"},
		{&machineapi.ResetRequest{SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "NOPE", Wipe: true}}},
			`failed to get volume status with label "NOPE"`},
	} {
		wantCode(t, admin.ResetGeneric(ctx, tc.req), codes.Unknown, tc.msg)
	}

	if n.LastReset() != nil {
		t.Fatal("rejected resets were recorded")
	}

	fingerprint := n.MaintenanceFingerprint()

	// USER_DISKS leaves the system alone: the node reboots into its config.
	userDisks := &machineapi.ResetRequest{Mode: machineapi.ResetRequest_USER_DISKS, UserDisksToWipe: []string{"/dev/nvme0n1"}, Reboot: true}
	if err := admin.ResetGeneric(ctx, userDisks); err != nil {
		t.Fatalf("USER_DISKS reset: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if !proto.Equal(n.LastReset(), userDisks) || n.MaintenanceFingerprint() != fingerprint {
		t.Fatalf("after USER_DISKS reset: last %v, fingerprint changed %v", n.LastReset(), n.MaintenanceFingerprint() != fingerprint)
	}

	admin = adminClient(t, n, cl)
	mustMachineConfig(t, admin, config.ActiveID)

	// Wiping only STATE drops the config: maintenance mode with a new certificate.
	wipeState := &machineapi.ResetRequest{SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "STATE", Wipe: true}}, Reboot: true}
	if err := admin.ResetGeneric(ctx, wipeState); err != nil {
		t.Fatalf("STATE reset: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	if n.MaintenanceFingerprint() == fingerprint {
		t.Fatal("STATE wipe kept the maintenance certificate")
	}

	wantHistory(t, n, slices.Concat(installedHistory,
		[]Phase{PhaseResetting, PhaseRebooting, PhaseRunning, PhaseResetting, PhaseRebooting, PhaseMaintenance})...)
}
