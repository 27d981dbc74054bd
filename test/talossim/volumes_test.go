package talossim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// encryptedConfig is cfg with STATE and EPHEMERAL encrypted by LUKS2 under keys of the given kind
// (tpm, nodeID) in slots, as Ichor renders them.
func encryptedConfig(cfg []byte, kind string, slots ...int) []byte {
	out := string(cfg)
	for _, volume := range []string{"STATE", "EPHEMERAL"} {
		out += fmt.Sprintf("---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: %s\nencryption:\n  provider: luks2\n  keys:\n", volume)
		for _, slot := range slots {
			key := "nodeID: {}"
			if kind == "tpm" {
				key = "tpm: {checkSecurebootStatusOnEnroll: true}"
			}

			out += fmt.Sprintf("    - slot: %d\n      %s\n", slot, key)
			if volume == "EPHEMERAL" {
				out += "      lockToState: true\n"
			}
		}
	}

	return []byte(out)
}

// rebootInto applies cfg in REBOOT mode and waits for the node to run again.
func rebootInto(t *testing.T, n *Node, c *client.Client, cfg []byte) {
	t.Helper()

	ctx := testContext(t)
	before := n.BootID()

	if _, err := c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cfg, Mode: machineapi.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatalf("ApplyConfiguration REBOOT: %v", err)
	}

	if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	if n.BootID() == before {
		t.Fatal("the node did not reboot")
	}

	// The client may still hold its connection to the API of the boot before, which answers
	// Unavailable until the client reconnects, as a real node's does.
	pollUntil(t, ctx, "the client to reach the rebooted node's API", func() (bool, error) {
		_, err := c.Version(ctx)
		if status.Code(err) == codes.Unavailable {
			return false, nil
		}

		return err == nil, err
	})
}

// volumeStatus reads a VolumeStatus through the node's COSI API.
func volumeStatus(t *testing.T, c *client.Client, id string) *block.VolumeStatusSpec {
	t.Helper()

	vs, err := safe.StateGetByID[*block.VolumeStatus](testContext(t), c.COSI, id)
	if err != nil {
		t.Fatalf("VolumeStatus %s: %v", id, err)
	}

	return vs.TypedSpec()
}

// wantVolumes checks that STATE and EPHEMERAL opened with the key of slot used, synced without a
// failure, and hold exactly the key slots slots.
func wantVolumes(t *testing.T, n *Node, c *client.Client, used int, slots ...int) {
	t.Helper()

	for _, volume := range []string{"STATE", "EPHEMERAL"} {
		st := volumeStatus(t, c, volume)
		if st.Phase != block.VolumePhaseReady || st.EncryptionProvider != block.EncryptionProviderLUKS2 || st.EncryptionSlot == nil ||
			*st.EncryptionSlot != used || len(st.EncryptionFailedSyncs) > 0 {
			t.Fatalf("%s: phase %s, provider %s, slot %v, failed syncs %q, error %q; want ready, luks2, opened with slot %d, no failed sync",
				volume, st.Phase, st.EncryptionProvider, st.EncryptionSlot, st.EncryptionFailedSyncs, st.ErrorMessage, used)
		}

		if got := n.KeySlots(volume); !slices.Equal(got, slots) {
			t.Fatalf("%s key slots: %v, want %v", volume, got, slots)
		}
	}
}

// TestDiskEncryptionKeyRotation: a SecureBoot node installs with STATE and EPHEMERAL sealed to its TPM
// in slot 0; a boot with slots 0 and 1 adds slot 1 (opened with 0), a boot with slot 1 alone drops
// slot 0 (opened with 1), as Talos syncs key slots when it opens a volume. talosctl reads the result.
// A config whose only slot the volume does not hold stops the boot at STATE.
func TestDiskEncryptionKeyRotation(t *testing.T) {
	t.Parallel()

	cl := newCluster(t)
	n := appliedNode(t, testContext(t), Options{Hostname: "cp-luks", SecureBoot: true, Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.21/24")}},
		encryptedConfig(cl.cp, "tpm", 0), PhaseRunning)
	admin := certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	wantVolumes(t, n, admin, 0, 0)

	if got := volumeStatus(t, admin, "STATE").ConfiguredEncryptionKeys; !slices.Equal(got, []string{"tpm"}) {
		t.Fatalf("configured keys %q, want [tpm]", got)
	}

	rebootInto(t, n, admin, encryptedConfig(cl.cp, "tpm", 0, 1))
	wantVolumes(t, n, admin, 0, 0, 1)

	rebootInto(t, n, admin, encryptedConfig(cl.cp, "tpm", 1))
	wantVolumes(t, n, admin, 1, 1)

	cfg := writeTalosconfig(t, n, cl, role.Reader)
	r := runTalosctl(t, talosctl(t), "", "--talosconfig", cfg, "--nodes", "10.5.0.21", "get", "volumestatus", "STATE", "-o", "yaml").mustSucceed(t)
	wantLine(t, r, r.stdout, "encryptionProvider: luks2")
	wantLine(t, r, r.stdout, "encryptionSlot: 1")

	// Slot 0 is gone: a boot with it alone cannot open STATE, and stops there.
	ctx := testContext(t)
	if _, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: encryptedConfig(cl.cp, "tpm", 0), Mode: machineapi.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatalf("ApplyConfiguration REBOOT: %v", err)
	}

	pollUntil(t, ctx, "STATE failing to open", func() (bool, error) {
		n.mu.Lock()
		defer n.mu.Unlock()

		st := n.volumes["STATE"].status

		return st.Phase == block.VolumePhaseFailed && strings.Contains(st.ErrorMessage, "no TPM token in key slot 0"), nil
	})

	if p := n.Phase(); p != PhaseRebooting {
		t.Fatalf("phase %s after STATE failed to open, want the boot stopped (%s)", p, PhaseRebooting)
	}
}

// TestDiskEncryptionTPMNeedsSecureBoot: a tpm key that asks for SecureBoot is not enrolled on a node
// that booted without it, and the node never comes up; a nodeID key is derived again on every boot, so
// a second slot holds the same key.
func TestDiskEncryptionTPMNeedsSecureBoot(t *testing.T) {
	t.Parallel()

	cl := newCluster(t)
	n := startNode(t, Options{Hostname: "cp-no-sb"})
	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(testContext(t),
		&machineapi.ApplyConfigurationRequest{Data: encryptedConfig(cl.cp, "tpm", 0)}); err != nil {
		t.Fatalf("maintenance ApplyConfiguration: %v", err)
	}

	pollUntil(t, testContext(t), "the TPM enrolment to fail", func() (bool, error) {
		n.mu.Lock()
		defer n.mu.Unlock()

		v := n.volumes["STATE"]

		return v != nil && strings.Contains(v.status.ErrorMessage, "SecureBoot is not enabled"), nil
	})

	if p := n.Phase(); p != PhaseRebooting {
		t.Fatalf("phase %s after STATE failed to format, want the boot stopped (%s)", p, PhaseRebooting)
	}

	if slots := n.KeySlots("STATE"); slots != nil {
		t.Fatalf("STATE key slots %v after a failed enrolment, want none", slots)
	}

	m := appliedNode(t, testContext(t), Options{Hostname: "cp-nodeid"}, encryptedConfig(cl.cp, "nodeID", 0), PhaseRunning)
	admin := certClient(t, m, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))
	rebootInto(t, m, admin, encryptedConfig(cl.cp, "nodeID", 0, 1))
	wantVolumes(t, m, admin, 0, 0, 1)

	m.mu.Lock()
	same := m.volumes["STATE"].luks.slots[0].passphrase == m.volumes["STATE"].luks.slots[1].passphrase
	m.mu.Unlock()

	if !same {
		t.Fatal("two nodeID slots hold different keys")
	}
}
