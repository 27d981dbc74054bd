package talossim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"maps"
	"slices"
	"strconv"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// The system volumes STATE and EPHEMERAL are prepared at every boot as Talos's volume manager does:
// a volume never formatted is formatted (and encrypted, when its VolumeConfig says so, with a key from
// every configured slot); an encrypted one is opened with the first configured key, in slot order, that
// unlocks it, and its key slots are then synced with the config (Talos's encryption handler): a
// configured slot that is missing is added, one whose key no longer unlocks is replaced, and a slot the
// config no longer names is removed. A sync that fails is recorded in the volume's status, and the
// volume stays open. This is how a key is rotated on Talos: a boot with the old and the new slot adds
// the new one, a boot with the new slot alone drops the old one.
//
// Keys are modelled by what unlocks them, not by cryptography: a static key is its passphrase, a nodeID
// key is derived from the node's UUID and the volume's name (rotating it gives the same key), a tpm key
// is a random passphrase sealed to the node's TPM, kept as the slot's token, that only this node
// unseals; enrolling one fails when the key asks for SecureBoot and the node did not boot with it. KMS
// keys are not simulated. The encryption comes from VolumeConfig documents only (the deprecated
// machine.systemDiskEncryption is not read).
//
// A STATE that no configured key opens stops the boot there, the API down, as a Talos node whose config
// volume does not open never comes up; an EPHEMERAL that does not open is a failed volume on a running
// node.

// preparedVolumes are the volumes a boot prepares, in order.
var preparedVolumes = []string{volumeSTATE, volumeEPHEMERAL}

// systemVolume is one system volume on the system disk.
type systemVolume struct {
	// formatted: a filesystem (or a LUKS2 header) was written.
	formatted bool
	// luks is its LUKS2 header when the volume is encrypted, nil when not.
	luks *luksHeader
	// status is what the last boot made of it.
	status block.VolumeStatusSpec
	// inUse: the last boot set the volume up, so its status is published. A boot without a config sets
	// up none (Talos derives them from the config), and the volume's contents stay for a later boot.
	inUse bool
	// partition is the volume's partition number on the system disk, given when it was created; 0 for
	// a directory.
	partition int
}

// luksHeader holds the key slots of an encrypted volume.
type luksHeader struct {
	slots map[int]luksSlot
}

// luksSlot is one key slot: the passphrase that unlocks it and, for a sealed key, the token beside it.
type luksSlot struct {
	passphrase string
	sealed     bool // a tpm key: the passphrase is the token only this node's TPM unseals
}

// unlocks reports whether passphrase unlocks any slot, as cryptsetup tries every slot.
func (h *luksHeader) unlocks(passphrase string) bool {
	for _, s := range h.slots {
		if s.passphrase == passphrase {
			return true
		}
	}

	return false
}

// KeySlots returns the LUKS key slots of volume (STATE or EPHEMERAL), sorted; nil when the volume is not
// encrypted or not formatted.
func (n *Node) KeySlots(volume string) []int {
	n.mu.Lock()
	defer n.mu.Unlock()

	v := n.volumes[volume]
	if v == nil || v.luks == nil {
		return nil
	}

	return slices.Sorted(maps.Keys(v.luks.slots))
}

// keyHandler is one configured key of a volume, as Talos's key handlers see it.
type keyHandler struct {
	slot int
	key  configconfig.EncryptionKey
}

// kind is the key type as VolumeStatus's configuredEncryptionKeys lists it.
func (h keyHandler) kind() string {
	switch {
	case h.key.Static() != nil:
		return block.EncryptionKeyStatic.String()
	case h.key.NodeID() != nil:
		return block.EncryptionKeyNodeID.String()
	case h.key.KMS() != nil:
		return block.EncryptionKeyKMS.String()
	default:
		return block.EncryptionKeyTPM.String()
	}
}

// newKey makes the key of a new slot: the passphrase and whether it is sealed.
func (n *Node) newKey(h keyHandler, volume string) (luksSlot, error) {
	switch {
	case h.key.Static() != nil:
		return luksSlot{passphrase: "static:" + string(h.key.Static().Key())}, nil
	case h.key.NodeID() != nil:
		return luksSlot{passphrase: "nodeID:" + n.opts.SystemUUID + ":" + volume}, nil
	case h.key.KMS() != nil:
		return luksSlot{}, errors.New("KMS keys are not simulated")
	case h.key.TPM() != nil:
		if h.key.TPM().CheckSecurebootOnEnroll() && !n.opts.SecureBoot {
			return luksSlot{}, errors.New("failed to enroll the TPM key: SecureBoot is not enabled")
		}

		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return luksSlot{}, err
		}

		return luksSlot{passphrase: "tpm:" + hex.EncodeToString(b), sealed: true}, nil
	default:
		return luksSlot{}, fmt.Errorf("slot %d has no key", h.slot)
	}
}

// getKey is the passphrase handler h gives for its slot of header: a tpm key unseals the slot's token.
func (n *Node) getKey(h keyHandler, header *luksHeader, volume string) (string, error) {
	if h.key.TPM() == nil {
		s, err := n.newKey(h, volume)

		return s.passphrase, err
	}

	s, ok := header.slots[h.slot]
	if !ok || !s.sealed {
		return "", fmt.Errorf("no TPM token in key slot %d", h.slot)
	}

	return s.passphrase, nil
}

// keyHandlers are the keys cfg configures for volume, in slot order; nil when the volume is not
// encrypted.
func keyHandlers(cfg config.Provider, volume string) []keyHandler {
	if cfg == nil || cfg.Volumes() == nil {
		return nil
	}

	vc, ok := cfg.Volumes().ByName(volume)
	if !ok || vc.Encryption() == nil || vc.Encryption().Provider() != block.EncryptionProviderLUKS2 {
		return nil
	}

	var hs []keyHandler
	for _, k := range vc.Encryption().Keys() {
		hs = append(hs, keyHandler{slot: k.Slot(), key: k})
	}

	slices.SortFunc(hs, func(a, b keyHandler) int { return a.slot - b.slot })

	return hs
}

// prepareVolumesLocked prepares STATE, EPHEMERAL and the volumes in it (volumes_system.go) for a boot
// into cfg and reports whether STATE opened.
func (n *Node) prepareVolumesLocked(cfg config.Provider) bool {
	n.unmountVolumesLocked()

	if v := n.preparePartitionLocked(volumeSTATE, keyHandlers(cfg, volumeSTATE)); v.status.Phase == block.VolumePhaseFailed {
		log.Printf("talossim: STATE did not open, the boot stops: %s", v.status.ErrorMessage)

		return false
	}

	n.prepareEphemeralLocked(cfg)

	return true
}

// preparePartitionLocked prepares the partition volume name: creates it (on the first free partition
// number from 3: EFI and META come first), formats it when it never was and opens it.
func (n *Node) preparePartitionLocked(name string, handlers []keyHandler) *systemVolume {
	v := n.volumes[name]
	if v == nil || v.partition == 0 {
		v = &systemVolume{partition: n.freePartitionLocked()}
		n.volumes[name] = v
	}

	if !v.formatted {
		if err := n.formatLocked(v, name, handlers); err != nil {
			// Nothing was written: the next boot formats again.
			v.status = failedVolume(v.partition, fmt.Sprintf("error formatting and encrypting volume: %v", err))
		}
	}

	if v.formatted {
		v.status = n.openLocked(v, name, handlers)
	}

	v.inUse = true

	return v
}

// freePartitionLocked is the lowest partition number from 3 that no volume has.
func (n *Node) freePartitionLocked() int {
	for p := 3; ; p++ {
		if !slices.ContainsFunc(slices.Collect(maps.Values(n.volumes)), func(v *systemVolume) bool { return v.partition == p }) {
			return p
		}
	}
}

// unmountVolumesLocked marks every volume unused, as at the start of a boot.
func (n *Node) unmountVolumesLocked() {
	if n.volumes == nil {
		n.volumes = map[string]*systemVolume{}
	}

	for _, v := range n.volumes {
		v.inUse = false
	}
}

// formatLocked formats a new volume, encrypted with every configured key when there are keys.
func (n *Node) formatLocked(v *systemVolume, name string, handlers []keyHandler) error {
	if len(handlers) == 0 {
		v.formatted = true

		return nil
	}

	header := &luksHeader{slots: map[int]luksSlot{}}

	for _, h := range handlers {
		s, err := n.newKey(h, name)
		if err != nil {
			return err
		}

		header.slots[h.slot] = s
	}

	v.luks, v.formatted = header, true

	return nil
}

// openLocked opens v with the first configured key that unlocks it, syncs its key slots and returns
// its status.
func (n *Node) openLocked(v *systemVolume, name string, handlers []keyHandler) block.VolumeStatusSpec {
	switch {
	case v.luks == nil && len(handlers) == 0:
		st := readyVolume(v.partition)
		st.EncryptionProvider = block.EncryptionProviderNone

		return st
	case v.luks == nil:
		return failedVolume(v.partition, "block dev type mismatch: xfs != luks")
	case len(handlers) == 0:
		return failedVolume(v.partition, "filesystem type mismatch: luks != xfs")
	}

	used := -1

	var errs []error

	for _, h := range handlers {
		pass, err := n.getKey(h, v.luks, name)
		if err == nil && !v.luks.unlocks(pass) {
			err = fmt.Errorf("key slot %d: no key available with this passphrase", h.slot)
		}

		if err != nil {
			errs = append(errs, err)

			continue
		}

		used = h.slot

		break
	}

	if used < 0 {
		return failedVolume(v.partition, fmt.Sprintf("error opening encrypted volume: no handlers available to get encryption keys from: %v", errors.Join(errs...)))
	}

	st := readyVolume(v.partition)
	st.EncryptionProvider = block.EncryptionProviderLUKS2
	st.EncryptionSlot = &used
	st.EncryptionFailedSyncs = n.syncKeysLocked(v.luks, name, used, handlers)

	for _, h := range handlers {
		if !slices.Contains(st.ConfiguredEncryptionKeys, h.kind()) {
			st.ConfiguredEncryptionKeys = append(st.ConfiguredEncryptionKeys, h.kind())
		}
	}

	slices.Sort(st.ConfiguredEncryptionKeys)

	return st
}

// syncKeysLocked brings header's slots in line with handlers, as Talos does after opening a volume
// with the key of slot used, and returns the syncs that failed.
func (n *Node) syncKeysLocked(header *luksHeader, name string, used int, handlers []keyHandler) []string {
	var failed []string

	visited := map[int]bool{}

	for _, h := range handlers {
		visited[h.slot] = true

		if h.slot == used {
			continue
		}

		if _, ok := header.slots[h.slot]; ok {
			if pass, err := n.getKey(h, header, name); err == nil && header.slots[h.slot].passphrase == pass {
				continue // still unlocks
			}

			delete(header.slots, h.slot)
		}

		s, err := n.newKey(h, name)
		if err != nil {
			failed = append(failed, fmt.Sprintf("error adding key slot %d: %v", h.slot, err))

			continue
		}

		header.slots[h.slot] = s
	}

	for slot := range header.slots {
		if !visited[slot] {
			delete(header.slots, slot)
		}
	}

	return failed
}

// readyVolume is the status of a system volume on partition number partition of /dev/sda that opened.
func readyVolume(partition int) block.VolumeStatusSpec {
	st := block.VolumeStatusSpec{
		Phase:          block.VolumePhaseReady,
		Type:           block.VolumeTypePartition,
		Location:       "/dev/sda" + strconv.Itoa(partition),
		ParentLocation: "/dev/sda",
		PartitionIndex: partition,
		Filesystem:     block.FilesystemTypeXFS,
	}
	st.MountLocation = st.Location

	return st
}

// failedVolume is the status of a system volume on partition number partition that did not open.
func failedVolume(partition int, msg string) block.VolumeStatusSpec {
	st := readyVolume(partition)
	st.PreFailPhase = block.VolumePhaseLocated
	st.Phase = block.VolumePhaseFailed
	st.ErrorMessage = msg
	st.MountLocation = ""
	st.Filesystem = block.FilesystemTypeNone

	return st
}

// wipeVolumeLocked forgets a volume a reset wiped: the next boot formats it.
func (n *Node) wipeVolumeLocked(name string) {
	delete(n.volumes, name)
}

// volumeStatusesLocked are the statuses to publish: those of the volumes the last boot set up.
func (n *Node) volumeStatusesLocked() map[string]block.VolumeStatusSpec {
	out := map[string]block.VolumeStatusSpec{}

	for name, v := range n.volumes {
		if v.inUse {
			out[name] = v.status
		}
	}

	return out
}

// publishVolumes writes a VolumeStatus, labelled as a system volume like Talos's, for each volume set up
// and removes the others.
func publishVolumes(ctx context.Context, st state.State, volumes map[string]block.VolumeStatusSpec) error {
	for _, name := range publishedVolumes {
		r := block.NewVolumeStatus(block.NamespaceName, name)
		r.Metadata().Labels().Set(block.SystemVolumeLabel, "")

		spec, ok := volumes[name]
		if !ok {
			if err := removeResource(ctx, st, r.Metadata()); err != nil {
				return err
			}

			continue
		}

		*r.TypedSpec() = spec

		if err := putResource(ctx, st, r); err != nil {
			return err
		}
	}

	return nil
}
