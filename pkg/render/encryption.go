package render

import (
	"errors"
	"fmt"
	"slices"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// DiskKeySlots are the LUKS2 key slots a cluster's machine configs name
// for STATE and EPHEMERAL, in order: the slot of the cluster's key, or
// during a key rotation the old and the new slot (AddNew), then the new
// one alone (DropOld).
func DiskKeySlots(cluster *ichorv1alpha1.TalosCluster) []int {
	old := int(cluster.Status.DiskKeySlot)
	r := cluster.Status.DiskKeyRotation
	switch {
	case r == nil:
		return []int{old}
	case r.Phase == ichorv1alpha1.DiskKeyRotationDropOld:
		return []int{int(r.Slot)}
	default:
		return []int{min(old, int(r.Slot)), max(old, int(r.Slot))}
	}
}

// withDiskEncryption adds the VolumeConfig documents that encrypt STATE and
// EPHEMERAL with LUKS2 under e's key, one in each of slots. EPHEMERAL's key
// is locked to STATE as well, so its volume opens only beside the STATE it
// was made with.
func withDiskEncryption(cfg config.Provider, contract *config.VersionContract, e *ichorv1alpha1.DiskEncryption, slots []int) (config.Provider, error) {
	if !contract.VolumeConfigEncryptionSupported() {
		return nil, errors.New("disk encryption through VolumeConfig needs Talos v1.11 or later")
	}
	key := func(slot int) (block.EncryptionKey, error) {
		k := block.EncryptionKey{KeySlot: slot}
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
	for _, volume := range EncryptedVolumes {
		var keys []block.EncryptionKey
		for _, slot := range slots {
			k, err := key(slot)
			if err != nil {
				return nil, err
			}
			if volume == constants.EphemeralPartitionLabel {
				k.KeyLockToSTATE = pointer.To(true)
			}
			keys = append(keys, k)
		}
		spec := block.EncryptionSpec{EncryptionProvider: blockres.EncryptionProviderLUKS2, EncryptionKeys: keys}
		// The v1.14 generator writes a VolumeConfig of EPHEMERAL of its own
		// (its trim): the encryption goes into it.
		i := slices.IndexFunc(docs, func(d configconfig.Document) bool {
			v, ok := d.(*block.VolumeConfigV1Alpha1)
			return ok && v.MetaName == volume
		})
		if i < 0 {
			doc := block.NewVolumeConfigV1Alpha1()
			doc.MetaName = volume
			doc.EncryptionSpec = spec
			docs = append(docs, doc)
			continue
		}
		doc := docs[i].Clone().(*block.VolumeConfigV1Alpha1) //nolint:forcetypeassert // a clone of its own type
		doc.EncryptionSpec = spec
		docs = slices.Clone(docs)
		docs[i] = doc
	}
	return container.New(docs...)
}

// EncryptedVolumes are the volumes spec.security.diskEncryption encrypts.
var EncryptedVolumes = []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel}

// ConfiguredDiskKeySlots reads, from a machine config, the key slots its
// VolumeConfigs name for each of EncryptedVolumes, sorted; a volume it
// does not encrypt has none.
func ConfiguredDiskKeySlots(data []byte) (map[string][]int, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("the node's config: %w", err)
	}
	out := map[string][]int{}
	for _, volume := range EncryptedVolumes {
		if cfg.Volumes() == nil {
			break
		}
		v, ok := cfg.Volumes().ByName(volume)
		if !ok || v.Encryption() == nil {
			continue
		}
		for _, k := range v.Encryption().Keys() {
			out[volume] = append(out[volume], k.Slot())
		}
		slices.Sort(out[volume])
	}
	return out, nil
}
