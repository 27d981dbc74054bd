package talossim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	blockcfg "github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// Beside STATE and EPHEMERAL, a configured Talos node has system volumes that live in EPHEMERAL: /var/lib
// and, under it, etcd's data directory, the volume ETCD (Talos v1.13 already publishes it, as a
// directory). Talos v1.14 adds the promotable system volumes (config.PromotableSystemVolumeNames): ETCD,
// CRI (/var/lib/containerd), KUBELET (/var/lib/kubelet) and LOG (/var/log) are directories on EPHEMERAL
// by default, and each moves onto a partition of its own (optionally encrypted) when a VolumeConfig
// document of its name asks for provisioning; the backing is fixed once the volume exists (VolumeConfig's
// RuntimeValidate refuses to change it). The backing decides what a reset keeps: wiping EPHEMERAL wipes
// the directory volumes with it, and a promoted volume is wiped only by naming its label.
//
// The simulator models the data of two of them: etcd's (the member the node's etcd belongs to) and the
// kubelet's certificates. Other directory volumes Talos creates (/var/log/audit, /var/lib/cni, …) are
// not published.

// volumeVarLib is the ID of the /var/lib directory volume, the parent of ETCD, CRI and KUBELET.
const volumeVarLib = "/var/lib"

// dirVolume is a directory system volume: where it is mounted, and since which Talos release it is a
// volume.
type dirVolume struct {
	id       string
	parent   string // the volume it is a directory of
	target   string // its directory in the parent's mount
	selinux  string
	mode     os.FileMode
	uid, gid int
	relabel  bool
	// promotable: from Talos v1.14 a VolumeConfig may place it on a partition of its own; on v1.13 only
	// /var/lib and ETCD are volumes at all.
	promotable bool
	upTo1_13   bool
}

// dirVolumes are the directory volumes the simulator publishes, parents first; the promotable ones in
// config.PromotableSystemVolumeNames order, which is also the order of their partitions.
var dirVolumes = []dirVolume{
	{id: volumeVarLib, parent: volumeEPHEMERAL, target: "lib", selinux: constants.EphemeralSelinuxLabel, mode: 0o700, upTo1_13: true},
	{
		id: constants.EtcdDataVolumeID, parent: volumeVarLib, target: "etcd", selinux: constants.EtcdDataSELinuxLabel, mode: 0o700,
		uid: constants.EtcdUserID, gid: constants.EtcdUserID, relabel: true, promotable: true, upTo1_13: true,
	},
	{id: constants.CRIContainerdVolumeID, parent: volumeVarLib, target: "containerd", selinux: constants.CRIContainerdDataSELinuxLabel, promotable: true},
	{id: constants.KubeletDataVolumeID, parent: volumeVarLib, target: "kubelet", selinux: constants.KubeletDataSELinuxLabel, mode: 0o700, promotable: true},
	{id: constants.LogVolumeID, parent: volumeEPHEMERAL, target: "log", selinux: constants.LogSELinuxLabel, mode: 0o755, promotable: true},
}

// publishedVolumes are the IDs of every VolumeStatus the simulator may publish.
var publishedVolumes = func() []string {
	ids := slices.Clone(preparedVolumes)
	for _, d := range dirVolumes {
		ids = append(ids, d.id)
	}

	return ids
}()

// mountSpec is where Talos mounts the volume, whatever its backing.
func (d dirVolume) mountSpec() block.MountSpec {
	return block.MountSpec{
		TargetPath:       d.target,
		ParentID:         d.parent,
		SelinuxLabel:     d.selinux,
		FileMode:         d.mode,
		UID:              d.uid,
		GID:              d.gid,
		RecursiveRelabel: d.relabel,
	}
}

// promotedOnto reports whether cfg places the promotable volume d on a partition of its own: a
// VolumeConfig of its name asks for provisioning (blockcfg.ProvisioningRequested), on Talos v1.14 and
// later.
func (d dirVolume) promotedOnto(cfg talosconfig.Provider, running string) (configconfig.VolumeConfig, bool) {
	if !d.promotable || runsUpTo1_13(running) || cfg == nil || cfg.Volumes() == nil {
		return nil, false
	}

	vc, ok := cfg.Volumes().ByName(d.id)

	return vc, ok && blockcfg.ProvisioningRequested(vc.Provisioning())
}

// prepareEphemeralLocked prepares EPHEMERAL and the volumes in it for a boot into cfg: directories,
// and on Talos v1.14 the promoted volumes' partitions, formatted (and encrypted) and opened like
// EPHEMERAL. A volume whose backing differs from the one it had (a release or a config that places it
// elsewhere) loses its data: the old backing is no longer where Talos mounts it.
func (n *Node) prepareEphemeralLocked(cfg talosconfig.Provider) {
	configs := make([]configconfig.VolumeConfig, len(dirVolumes)) // of the promoted volumes

	var created []newPartition

	if v := n.volumes[volumeEPHEMERAL]; v == nil || v.partition == 0 {
		created = append(created, newPartitionOf(volumeEPHEMERAL, cfg, true))
	}

	for i, d := range dirVolumes {
		vc, partition := d.promotedOnto(cfg, n.sw.running)

		if !n.isDirectoryLocked(d.id) != partition {
			n.loseVolumeDataLocked(d.id)
			delete(n.volumes, d.id)
		}

		if partition {
			configs[i] = vc

			if n.volumes[d.id] == nil {
				created = append(created, newPartitionOf(d.id, cfg, false))
			}
		}
	}

	slices.SortFunc(created, newPartition.compare)

	for _, p := range created {
		n.volumes[p.id] = &systemVolume{partition: n.freePartitionLocked()}
	}

	n.preparePartitionLocked(volumeEPHEMERAL, keyHandlers(cfg, volumeEPHEMERAL))

	for i, d := range dirVolumes {
		switch vc := configs[i]; {
		case runsUpTo1_13(n.sw.running) && !d.upTo1_13:
			// not a volume of that release
		case vc == nil:
			st := block.VolumeStatusSpec{Phase: block.VolumePhaseReady, Type: block.VolumeTypeDirectory, MountSpec: d.mountSpec()}
			n.volumes[d.id] = &systemVolume{formatted: true, status: st, inUse: true}
		default:
			v := n.preparePartitionLocked(d.id, keyHandlers(cfg, d.id))
			v.status.MountSpec = d.mountSpec()
			v.status.MountSpec.Secure = vc.Mount().Secure()
			v.status.MountSpec.NoExec = vc.Mount().Secure() && (d.id == constants.EtcdDataVolumeID || d.id == constants.LogVolumeID)
		}
	}
}

// newPartition is a partition a boot creates, with what orders its creation.
type newPartition struct {
	id      string
	grow    bool
	maxSize uint64
}

// newPartitionOf is the partition of volume id as cfg provisions it: EPHEMERAL grows unless its
// VolumeConfig says otherwise, a promoted volume does not unless its VolumeConfig says so.
func newPartitionOf(id string, cfg talosconfig.Provider, grow bool) newPartition {
	p := newPartition{id: id, grow: grow}

	if cfg != nil && cfg.Volumes() != nil {
		vc, _ := cfg.Volumes().ByName(id)
		p.grow = vc.Provisioning().Grow().ValueOr(grow)
		p.maxSize = vc.Provisioning().MaxSize().ValueOrZero()
	}

	return p
}

// compare orders the partitions a boot creates as Talos's volume manager provisions them
// (volumes.CompareVolumeConfigs): those that do not grow first, then the smaller maximum size (none
// is the largest), then by name. So EPHEMERAL, which grows, follows the volumes promoted with it.
func (p newPartition) compare(q newPartition) int {
	if p.grow != q.grow {
		if q.grow {
			return -1
		}

		return 1
	}

	return cmp.Or(cmp.Compare(cmp.Or(p.maxSize, math.MaxUint64), cmp.Or(q.maxSize, math.MaxUint64)), cmp.Compare(p.id, q.id))
}

// isDirectoryLocked reports whether the volume id is a directory on EPHEMERAL on this node: it is one
// unless the last boot placed it on a partition. On Talos v1.13, which has no KUBELET volume, the
// kubelet's data is in /var/lib/kubelet on EPHEMERAL all the same.
func (n *Node) isDirectoryLocked(id string) bool {
	v := n.volumes[id]

	return v == nil || v.partition == 0
}

// loseVolumeDataLocked is what the simulator models of a volume's data being gone: etcd's member data
// (the member stays listed in its cluster, as on a real node, and the node joins anew at its next boot)
// and the kubelet's certificates.
func (n *Node) loseVolumeDataLocked(id string) {
	switch id {
	case constants.EtcdDataVolumeID:
		if memberID := n.etcdLocal.memberID; memberID != 0 {
			n.etcd.loseData(memberID)
		}

		n.etcdLocal.memberID = 0
	case constants.KubeletDataVolumeID:
		n.kubeletCerts = nil
	}
}

// wipeEphemeralLocked is a wipe of EPHEMERAL: the snapshot EtcdRecover uploaded (/var/lib/etcd.snapshot)
// and every directory volume go with it, and so do their data; a promoted volume keeps its own.
func (n *Node) wipeEphemeralLocked() {
	n.dropRecoveryLocked()

	for _, d := range dirVolumes {
		if n.isDirectoryLocked(d.id) {
			n.loseVolumeDataLocked(d.id)
			delete(n.volumes, d.id)
		}
	}
}

// resetVolumeLocked resolves a label of ResetRequest.SystemPartitionsToWipe as machined does: the
// VolumeStatus of that ID must exist, and must be located (a partition). From Talos v1.14 a volume with
// no block device of its own (a directory) is accepted when the volume it resides on is wiped by the same
// request (wiped: the labels with Wipe set), and is then wiped as part of it.
func (n *Node) resetVolumeLocked(label string, wiped map[string]bool) error {
	st, ok := n.volumeStatusLocked(label)
	if !ok {
		return fmt.Errorf("failed to get volume status with label %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist",
			label, label)
	}

	if !n.installed && st.Type == block.VolumeTypePartition {
		return fmt.Errorf("failed to reset: volume %q is not located", label)
	}

	if st.Type == block.VolumeTypePartition {
		return nil
	}

	if runsUpTo1_13(n.sw.running) {
		return fmt.Errorf("failed to reset: volume %q is not located", label)
	}

	backing, err := n.backingVolumeLocked(label, st)
	if err != nil {
		return fmt.Errorf("failed to reset: %w", err)
	}

	if !wiped[backing] {
		return fmt.Errorf("failed to reset: volume %q resides on volume %q, and therefore %q cannot be wiped without wiping %q",
			label, backing, label, backing)
	}

	return nil
}

// volumeStatusLocked is the VolumeStatus a reset finds for id. EFI and META are partitions of an
// installed node that the simulator does not publish.
func (n *Node) volumeStatusLocked(id string) (block.VolumeStatusSpec, bool) {
	if id == volumeEFI || id == volumeMETA || id == volumeSTATE || id == volumeEPHEMERAL {
		return block.VolumeStatusSpec{Type: block.VolumeTypePartition}, true
	}

	st, ok := n.volumeStatusesLocked()[id]

	return st, ok
}

// backingVolumeLocked walks up from a volume without a block device of its own to the closest one that
// has one, as machined's system.FindBackingVolume does.
func (n *Node) backingVolumeLocked(id string, st block.VolumeStatusSpec) (string, error) {
	seen := map[string]bool{id: true}

	for {
		parent := st.ParentID
		if parent == "" {
			parent = st.MountSpec.ParentID
		}

		if parent == "" {
			return "", fmt.Errorf("volume %q is not located and doesn't reside on another volume", id)
		}

		if seen[parent] {
			return "", fmt.Errorf("cycle detected in the parent chain of volume %q at %q", id, parent)
		}

		seen[parent] = true

		var ok bool
		if st, ok = n.volumeStatusLocked(parent); !ok {
			return "", fmt.Errorf("failed to get parent volume status %q of volume %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist",
				parent, id, parent)
		}

		if st.Type == block.VolumeTypePartition {
			return parent, nil
		}
	}
}

// volumeConfigNamesUpTo1_13 are the volumes a VolumeConfig may name on Talos v1.13.
var volumeConfigNamesUpTo1_13 = []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel, constants.ImageCachePartitionLabel}

// refuseVolumeConfigsUnknownTo1_13 fails, as Talos v1.13's VolumeConfig validation does, on a VolumeConfig
// naming a volume that release cannot configure: the promotable volumes arrived in v1.14.
func refuseVolumeConfigsUnknownTo1_13(cfg talosconfig.Provider, running string) error {
	if !runsUpTo1_13(running) {
		return nil
	}

	var errs []error

	for _, doc := range cfg.Documents() {
		vc, ok := doc.(configconfig.VolumeConfig)
		if !ok || doc.Kind() != blockcfg.VolumeConfigKind || slices.Contains(volumeConfigNamesUpTo1_13, vc.Name()) {
			continue
		}

		errs = append(errs, fmt.Errorf("%s/%s: only %q volumes are supported", doc.Kind(), vc.Name(), volumeConfigNamesUpTo1_13))
	}

	return errors.Join(errs...)
}
