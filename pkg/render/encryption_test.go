package render

import (
	"errors"
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
			if _, _, err := Classify(plain.Config, out.Config); !errors.As(err, &reset) {
				t.Errorf("encrypting an installed machine: %v, want a reset", err)
			}
		})
	}
}
