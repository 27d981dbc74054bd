package render

import (
	"errors"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestRenderDiskEncryption: spec.security.diskEncryption becomes the
// VolumeConfig documents that encrypt STATE and EPHEMERAL, which machinery
// validates; turning it on for an installed machine needs a reset.
func TestRenderDiskEncryption(t *testing.T) {
	for _, key := range []ichorv1alpha1.DiskEncryptionKey{ichorv1alpha1.DiskEncryptionKeyTPM, ichorv1alpha1.DiskEncryptionKeyNodeID} {
		t.Run(string(key), func(t *testing.T) {
			in := testInput(t, testMachine("w-1", ichorv1alpha1.MachineRoleWorker, nil))
			plain, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			in.Cluster.Spec.Security.DiskEncryption = &ichorv1alpha1.DiskEncryption{Key: key}
			out, err := Render(in)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			cfg, err := configloader.NewFromBytes(out.Config)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			for _, volume := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
				v, ok := cfg.Volumes().ByName(volume)
				if !ok {
					t.Fatalf("no VolumeConfig %s", volume)
				}
				enc := v.Encryption()
				if enc == nil || enc.Provider() != blockres.EncryptionProviderLUKS2 || len(enc.Keys()) != 1 {
					t.Fatalf("%s encryption: %+v", volume, enc)
				}
				k := enc.Keys()[0]
				switch key {
				case ichorv1alpha1.DiskEncryptionKeyTPM:
					if k.TPM() == nil || !k.TPM().CheckSecurebootOnEnroll() {
						t.Errorf("%s: not a TPM key that checks SecureBoot", volume)
					}
				case ichorv1alpha1.DiskEncryptionKeyNodeID:
					if k.NodeID() == nil {
						t.Errorf("%s: not a node ID key", volume)
					}
				}
				if got, want := k.LockToSTATE(), volume == constants.EphemeralPartitionLabel; got != want {
					t.Errorf("%s: lockToSTATE %v, want %v", volume, got, want)
				}
			}
			var reset *ResetRequiredError
			if _, _, err := Classify(plain.Config, out.Config, ApplyWithReboot); !errors.As(err, &reset) {
				t.Errorf("encrypting an installed machine: %v, want a reset", err)
			}
		})
	}
}

// TestRenderDiskKeyRotation: a disk-encryption key rotation renders the
// old and the new key slot, then the new one alone, each a change that
// takes a reboot; the cluster's slot after it is the new one.
func TestRenderDiskKeyRotation(t *testing.T) {
	in := testInput(t, testMachine("cp-1", ichorv1alpha1.MachineRoleControlPlane, nil))
	in.Cluster.Spec.Security.DiskEncryption = &ichorv1alpha1.DiskEncryption{Key: ichorv1alpha1.DiskEncryptionKeyTPM}
	slotsOf := func(st ichorv1alpha1.TalosClusterStatus) ([]byte, []int) {
		t.Helper()
		in.Cluster.Status = st
		out, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(out.Config)
		if err != nil {
			t.Fatal(err)
		}
		var slots []int
		for _, volume := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
			v, _ := cfg.Volumes().ByName(volume)
			var got []int
			for _, k := range v.Encryption().Keys() {
				if k.TPM() == nil {
					t.Fatalf("%s slot %d is not a TPM key", volume, k.Slot())
				}
				got = append(got, k.Slot())
			}
			if slots != nil && !slices.Equal(got, slots) {
				t.Fatalf("STATE slots %v, EPHEMERAL slots %v", slots, got)
			}
			slots = got
		}
		return out.Config, slots
	}
	before, slots := slotsOf(ichorv1alpha1.TalosClusterStatus{})
	if !slices.Equal(slots, []int{0}) {
		t.Fatalf("slots before any rotation: %v", slots)
	}
	prev := before
	for _, c := range []struct {
		status ichorv1alpha1.TalosClusterStatus
		want   []int
	}{
		{ichorv1alpha1.TalosClusterStatus{DiskKeyRotation: &ichorv1alpha1.DiskKeyRotationStatus{Operation: "rotate", Phase: ichorv1alpha1.DiskKeyRotationAddNew, Slot: 1}}, []int{0, 1}},
		{ichorv1alpha1.TalosClusterStatus{DiskKeyRotation: &ichorv1alpha1.DiskKeyRotationStatus{Operation: "rotate", Phase: ichorv1alpha1.DiskKeyRotationDropOld, Slot: 1}}, []int{1}},
		{ichorv1alpha1.TalosClusterStatus{DiskKeySlot: 1, DiskKeyRotation: &ichorv1alpha1.DiskKeyRotationStatus{Operation: "again", Phase: ichorv1alpha1.DiskKeyRotationAddNew, Slot: 0}}, []int{0, 1}},
	} {
		cfg, slots := slotsOf(c.status)
		if !slices.Equal(slots, c.want) {
			t.Fatalf("%+v: slots %v, want %v", c.status.DiskKeyRotation, slots, c.want)
		}
		effect, _, err := Classify(prev, cfg, ApplyWithReboot)
		if err != nil || effect != ichorv1alpha1.ConfigEffectReboot {
			t.Fatalf("%+v: effect %s, %v; want a reboot", c.status.DiskKeyRotation, effect, err)
		}
		prev = cfg
	}
	if _, slots := slotsOf(ichorv1alpha1.TalosClusterStatus{DiskKeySlot: 1}); !slices.Equal(slots, []int{1}) {
		t.Fatalf("slots after the rotation: %v", slots)
	}
}
