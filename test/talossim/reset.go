package talossim

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// The partitions of an installed node's system disk. ResetRequest.SystemPartitionsToWipe names them, and
// the volumes of volumes_system.go, by label.
const (
	volumeEFI       = "EFI"
	volumeMETA      = "META"
	volumeSTATE     = "STATE"
	volumeEPHEMERAL = "EPHEMERAL"
)

// systemVolumes are the partitions of an installed node, in partition order.
var systemVolumes = []string{volumeEFI, volumeMETA, volumeSTATE, volumeEPHEMERAL}

// DiskWipes returns how many times each user disk was wiped by a reset.
func (n *Node) DiskWipes() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()

	return maps.Clone(n.diskWipes)
}

// LastReset returns a copy of the last Reset request the node accepted, nil if none.
func (n *Node) LastReset() *machine.ResetRequest {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.lastReset == nil {
		return nil
	}

	return proto.CloneOf(n.lastReset)
}

// Reset validates the request like machined, then resets the node asynchronously: with Graceful, the
// node is first cordoned and drained (its API up meanwhile) and a control plane leaves etcd; after
// Options.ResetDelay the API goes down, the selected disks are wiped; then the node reboots (Reboot) or
// powers off. Wiping the system disk (modes ALL and SYSTEM_DISK without SystemPartitionsToWipe) or
// its STATE volume removes the config and the node comes back in maintenance mode with a new
// maintenance certificate; USER_DISKS keeps the system intact. Wiping EPHEMERAL wipes etcd's data and
// the kubelet's where they are directories on it, as they always are before Talos v1.14; a volume a
// VolumeConfig placed on a partition of its own is wiped by its label (volumes_system.go).
func (s *machineServer) Reset(_ context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	actorID, err := randomUUID()
	if err != nil {
		return nil, fmt.Errorf("generating actor ID: %w", err)
	}

	n := s.node

	n.mu.Lock()
	defer n.mu.Unlock()

	if n.stopped {
		return nil, errNodeStopped
	}

	if err = n.validateResetLocked(in); err != nil {
		return nil, err
	}

	n.lastReset = proto.CloneOf(in)

	if n.sequence {
		return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actorID}}}, nil // dropped, like machined's locked sequencer
	}

	gen := n.beginSequenceLocked()
	n.recordSequenceLocked("reset", actorID)
	n.cancelRollbackLocked()

	req := proto.CloneOf(in)

	// A graceful reset drains the node first (drain.go), and the sequence runs Options.ResetDelay, its
	// API up meanwhile.
	spec, kubeletRuns := n.kubeletSpecLocked()
	if drain := req.GetGraceful() && kubeletRuns && n.joinedLocked(); drain || n.opts.ResetDelay > 0 {
		n.wg.Go(func() {
			if drain {
				n.drain(spec, "reset")
			}

			if n.delay(n.opts.ResetDelay) && n.resetAfterDrain(gen, actorID) {
				n.runReset(gen, req)
			}
		})

		return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actorID}}}, nil
	}

	if err = n.stopForResetLocked(actorID); err != nil {
		return nil, err
	}

	n.wg.Go(func() { n.runReset(gen, req) })

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actorID}}}, nil
}

// stopForResetLocked takes the API down for the wipe. That is the reset sequence's stopEverything phase,
// whose stopAllServices task stops apid: like machined, the node records the start of both first, and
// `talosctl reset --wait` waits for that task (action.StopAllServicesEventFn) before it looks for the
// node coming back.
func (n *Node) stopForResetLocked(actorID string) error {
	n.events.add(&machine.PhaseEvent{Phase: "stopEverything", Action: machine.PhaseEvent_START}, actorID)
	n.events.add(&machine.TaskEvent{Task: "stopAllServices", Action: machine.TaskEvent_START}, actorID)
	n.replaceAPILocked(true)

	return n.setPhaseLocked(PhaseResetting)
}

// resetAfterDrain stops the node for its wipe once drained, unless another sequence took over.
func (n *Node) resetAfterDrain(gen uint64, actorID string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	if !n.currentLocked(gen) {
		return false
	}

	if err := n.stopForResetLocked(actorID); err != nil {
		log.Printf("talossim: stopping for the reset: %v", err)
	}

	return true
}

// validateResetLocked mirrors machined's Reset input checks and their (plain, code Unknown) errors.
func (n *Node) validateResetLocked(in *machine.ResetRequest) error {
	if len(in.GetUserDisksToWipe()) > 0 {
		if in.GetMode() == machine.ResetRequest_SYSTEM_DISK {
			return errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
		}

		systemDisk := n.systemDiskLocked()

		for _, dev := range in.GetUserDisksToWipe() {
			if !slices.ContainsFunc(n.opts.Disks, func(d Disk) bool { return d.Path == dev }) {
				return fmt.Errorf("reset user disk failed: device %s wasn't found", dev)
			}

			if dev == systemDisk {
				return fmt.Errorf("reset user disk failed: device %s is the system disk", dev)
			}
		}
	}

	if len(in.GetSystemPartitionsToWipe()) > 0 {
		if in.GetMode() == machine.ResetRequest_USER_DISKS {
			return errors.New("reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
		}

		wiped := map[string]bool{}

		for _, spec := range in.GetSystemPartitionsToWipe() {
			wiped[spec.GetLabel()] = wiped[spec.GetLabel()] || spec.GetWipe()
		}

		for _, spec := range in.GetSystemPartitionsToWipe() {
			if err := n.resetVolumeLocked(spec.GetLabel(), wiped); err != nil {
				return err
			}
		}
	}

	return nil
}

// SystemDisk is the disk Talos is installed on, "" while it is not installed.
func (n *Node) SystemDisk() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.systemDiskLocked()
}

// systemDiskLocked returns the install disk of an installed node, "" otherwise.
func (n *Node) systemDiskLocked() string {
	if !n.installed || n.active == nil || n.active.Machine() == nil {
		return ""
	}

	return n.active.Machine().Install().Disk()
}

// runReset is the reset sequence after the API went down: leave etcd (graceful control plane), wipe,
// then reboot or power off.
func (n *Node) runReset(gen uint64, req *machine.ResetRequest) {
	// A wiped node is a new machine: it gets a new maintenance identity (made before locking, it is slow).
	ident, err := newMaintenanceIdentity(n.certIPs(true), []string{n.opts.Hostname})
	if err != nil {
		log.Printf("talossim: creating maintenance identity after reset: %v", err)
	}

	n.mu.Lock()

	if !n.currentLocked(gen) {
		n.mu.Unlock()

		return
	}

	if req.GetGraceful() && n.isControlPlaneLocked() && n.etcdLocal.memberID != 0 {
		n.etcd.remove(n.etcdLocal.memberID)
		n.etcdLocal.memberID = 0
	}

	if n.wipeLocked(req) && ident != nil {
		n.maint = ident
	}

	if !req.GetReboot() {
		if err = n.powerOffLocked(); err != nil {
			log.Printf("talossim: powering off after reset: %v", err)
		}

		n.mu.Unlock()

		return
	}

	if err = n.setPhaseLocked(PhaseRebooting); err != nil {
		log.Printf("talossim: rebooting after reset: %v", err)
	}

	n.mu.Unlock()

	n.finishReboot(gen)
}

// wipeLocked applies the wipe of req to the node's state and reports whether the config was wiped.
// A user disk's data is not modelled beyond the count of its wipes (DiskWipes).
func (n *Node) wipeLocked(req *machine.ResetRequest) bool {
	if req.GetMode() != machine.ResetRequest_SYSTEM_DISK {
		for _, dev := range req.GetUserDisksToWipe() {
			if n.diskWipes == nil {
				n.diskWipes = map[string]int{}
			}

			n.diskWipes[dev]++
		}
	}

	if req.GetMode() == machine.ResetRequest_USER_DISKS {
		return false
	}

	wipe := map[string]bool{}

	if len(req.GetSystemPartitionsToWipe()) == 0 { // the whole system disk
		for _, v := range systemVolumes {
			wipe[v] = true
		}

		for v := range n.volumes {
			wipe[v] = true
		}
	}

	for _, spec := range req.GetSystemPartitionsToWipe() {
		wipe[spec.GetLabel()] = wipe[spec.GetLabel()] || spec.GetWipe()
	}

	if wipe[volumeEFI] { // nothing bootable left: the machine boots its install media again
		n.installed = false
		n.sw.installed, n.sw.installedImage = "", ""
	}

	if wipe[volumeMETA] {
		n.sw.staged, n.sw.stagedImage = "", ""
	}

	// A promoted volume (its own partition) is wiped when named; one that is a directory goes with
	// EPHEMERAL, which the request then names too (resetVolumeLocked).
	for _, d := range dirVolumes {
		if wipe[d.id] && !n.isDirectoryLocked(d.id) {
			n.loseVolumeDataLocked(d.id)
			n.wipeVolumeLocked(d.id)
		}
	}

	if wipe[volumeEPHEMERAL] {
		n.wipeEphemeralLocked()
	}

	if wipe[volumeSTATE] {
		n.active, n.persisted = nil, nil
	}

	for _, v := range preparedVolumes {
		if wipe[v] {
			n.wipeVolumeLocked(v)
		}
	}

	if err := n.publishLocked(); err != nil {
		log.Printf("talossim: publishing wiped state: %v", err)
	}

	return wipe[volumeSTATE]
}
