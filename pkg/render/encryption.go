package render

import (
	"errors"
	"fmt"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// withDiskEncryption adds the VolumeConfig documents that encrypt STATE and
// EPHEMERAL with LUKS2 under e's key. EPHEMERAL's key is locked to STATE
// as well, so its volume opens only beside the STATE it was made with.
func withDiskEncryption(cfg config.Provider, contract *config.VersionContract, e *ichorv1alpha1.DiskEncryption) (config.Provider, error) {
	if !contract.VolumeConfigEncryptionSupported() {
		return nil, errors.New("disk encryption through VolumeConfig needs Talos v1.11 or later")
	}
	key := func() (block.EncryptionKey, error) {
		k := block.EncryptionKey{KeySlot: 0}
		switch e.Key {
		case ichorv1alpha1.DiskEncryptionKeyTPM:
			// Enrolment fails on a node whose firmware does not enforce SecureBoot.
			k.KeyTPM = &block.EncryptionKeyTPM{TPMCheckSecurebootStatusOnEnroll: pointer.To(true)}
		case ichorv1alpha1.DiskEncryptionKeyNodeID:
			k.KeyNodeID = &block.EncryptionKeyNodeID{}
		default:
			return k, fmt.Errorf("unknown key %q (want tpm or nodeID)", e.Key)
		}
		return k, nil
	}
	docs := cfg.Documents()
	for _, volume := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
		k, err := key()
		if err != nil {
			return nil, err
		}
		if volume == constants.EphemeralPartitionLabel {
			k.KeyLockToSTATE = pointer.To(true)
		}
		doc := block.NewVolumeConfigV1Alpha1()
		doc.MetaName = volume
		doc.EncryptionSpec = block.EncryptionSpec{EncryptionProvider: blockres.EncryptionProviderLUKS2, EncryptionKeys: []block.EncryptionKey{k}}
		docs = append(docs, doc)
	}
	return container.New(docs...)
}
