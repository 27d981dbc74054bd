package talossim

import (
	"log"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// software tracks the Talos versions of a node, and the installer images they came from ("" when
// unknown): the one running, the one installed on disk (booted next), and an upgrade staged for the
// next boot.
type software struct {
	running   string
	installed string
	staged    string

	runningImage   string
	installedImage string
	stagedImage    string
}

// delay waits d, returning false if the node is stopped first.
func (n *Node) delay(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-n.stopCh:
			return false
		default:
			return true
		}
	}

	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-t.C:
		return true
	case <-n.stopCh:
		return false
	}
}

// replaceAPILocked retires the current apid instance and, unless down, starts a new one for the current
// state, like apid restarting with a new service config.
func (n *Node) replaceAPILocked(down bool) {
	n.retire(n.api)
	n.api = nil

	if !down {
		n.api = n.newAPIServer(!n.configuredLocked())
	}
}

// beginSequenceLocked marks a sequence as running and returns its generation; background steps check
// currentLocked(gen) so that a sequence taken over (by Shutdown) or outlived by Stop does nothing more.
func (n *Node) beginSequenceLocked() uint64 {
	n.sequence = true
	n.seqGen++

	return n.seqGen
}

// currentLocked reports whether the sequence of generation gen may still act on the node.
func (n *Node) currentLocked(gen uint64) bool {
	return !n.stopped && n.seqGen == gen
}

// recordSequenceLocked records the start of an API-triggered sequence as Talos's SequenceEvent.
func (n *Node) recordSequenceLocked(sequence, actorID string) {
	n.events.add(&machine.SequenceEvent{Sequence: sequence, Action: machine.SequenceEvent_START}, actorID)
}

// startInstallLocked activates cfg applied in maintenance mode and runs install → reboot → boot
// (install.go has what a failed installer does).
func (n *Node) startInstallLocked(cfg config.Provider) error {
	n.active, n.persisted = cfg, cfg
	gen := n.beginSequenceLocked()

	// From v1.14 the UnattendedInstallController installs a config with an UnattendedInstallConfig;
	// the install sequence installs the others.
	n.startUnattendedLocked()

	if n.unattended == nil {
		n.recordSequenceLocked("install", "")
	}

	if err := n.setPhaseLocked(PhaseInstalling); err != nil {
		return err
	}

	n.replaceAPILocked(false)

	n.wg.Go(func() {
		if !n.delay(n.opts.InstallDelay) {
			return
		}

		n.install(gen)
	})

	return nil
}

// requestRebootLocked starts a reboot (recorded as sequence for actorID) unless a sequence is already
// running: like machined's sequencer lock, the request is then dropped (the running sequence ends in a
// boot anyway).
func (n *Node) requestRebootLocked(sequence, actorID string) error {
	if n.stopped {
		return errNodeStopped
	}

	if n.sequence {
		return nil
	}

	gen := n.beginSequenceLocked()
	n.recordSequenceLocked(sequence, actorID)

	if err := n.enterRebootLocked(); err != nil {
		return err
	}

	n.wg.Go(func() { n.finishReboot(gen) })

	return nil
}

// enterRebootLocked takes the API down and marks the node rebooting; a pending TRY revert dies with the boot.
func (n *Node) enterRebootLocked() error {
	n.cancelRollbackLocked()
	n.replaceAPILocked(true)

	return n.setPhaseLocked(PhaseRebooting)
}

// finishReboot waits RebootDelay, then boots unless the sequence gen was superseded.
func (n *Node) finishReboot(gen uint64) {
	if !n.delay(n.opts.RebootDelay) {
		return
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	if !n.currentLocked(gen) {
		return
	}

	if n.faults.set.NeverBoots {
		if err := n.powerOffLocked(); err != nil {
			log.Printf("talossim: powering off instead of booting: %v", err)
		}

		return
	}

	n.bootLocked()
}

// bootLocked is one boot: the event buffer starts empty, a staged upgrade is installed, the persisted
// config becomes active (a node without an installed config comes back in maintenance mode), an etcd
// member of a bootstrapped cluster is (re)joined and the API comes up.
func (n *Node) bootLocked() {
	n.events.reset()
	n.bootTime = time.Now()

	if id, err := randomUUID(); err == nil {
		n.bootID = id
	} else {
		log.Printf("talossim: new boot ID: %v", err)
	}

	if !n.installed {
		n.persisted = nil // nothing was written to disk
	}

	if !n.installStagedLocked() {
		return
	}

	n.sw.running, n.sw.runningImage = n.opts.Version, ""

	if n.installed && n.sw.installed != "" {
		n.sw.running, n.sw.runningImage = n.sw.installed, n.sw.installedImage
	}

	n.active = n.persisted
	n.sequence = false
	n.etcdLocal.stopped = false
	n.bootUnattendedLocked()

	if !n.installed || !n.configuredLocked() {
		n.unmountVolumesLocked()
	} else if !n.prepareVolumesLocked(n.active) {
		// The config lives on STATE: a boot that cannot open it stops there.
		if err := n.publishLocked(); err != nil {
			log.Printf("talossim: publishing boot state: %v", err)
		}

		return
	}

	next := PhaseMaintenance
	if n.installed && n.configuredLocked() {
		next = PhaseRunning
	}

	if err := n.setPhaseLocked(next); err != nil {
		log.Printf("talossim: publishing boot state: %v", err)
	}

	n.bootedControlPlaneLocked(next == PhaseRunning && n.isControlPlaneLocked())
	n.joinEtcdLocked()
	n.replaceAPILocked(false)
}

// powerOffLocked turns the node off: it takes over any running sequence, and the API stays down until
// PowerOn.
func (n *Node) powerOffLocked() error {
	n.seqGen++
	n.sequence = false
	n.poweredOffControlPlaneLocked()
	n.cancelRollbackLocked()
	n.replaceAPILocked(true)

	return n.setPhaseLocked(PhaseShutdown)
}

// bootedControlPlaneLocked tells the node's Kubernetes how the node booted (kubernetes_power.go): as a
// control plane of its cluster, or not (a wiped node has left its cluster).
func (n *Node) bootedControlPlaneLocked(controlPlane bool) {
	k := n.opts.Kubernetes
	if k == nil {
		return
	}

	endpoint := ""
	if ep := clusterEndpoint(n.active); controlPlane && ep != nil {
		endpoint = ep.String()
	}

	if n.controlPlaneOf != "" && n.controlPlaneOf != endpoint {
		k.controlPlaneLeft(n.controlPlaneOf, n.Addr())
	}

	n.controlPlaneOf = endpoint
	if endpoint != "" {
		k.controlPlaneOn(n.active, n.Addr())
	}
}

// poweredOffControlPlaneLocked tells the node's Kubernetes that the node, a control plane, is off.
func (n *Node) poweredOffControlPlaneLocked() {
	if k := n.opts.Kubernetes; k != nil && n.controlPlaneOf != "" {
		k.controlPlaneOff(n.controlPlaneOf, n.Addr())
	}
}

// rollbackAfterLocked arms the TRY-mode timer: after timeout the config active now is restored.
// Like Talos, a second TRY re-arms the timer and captures the (tried) config active at that point.
func (n *Node) rollbackAfterLocked(timeout time.Duration) {
	previous := n.active

	n.cancelRollbackLocked()

	var timer *time.Timer

	timer = time.AfterFunc(timeout, func() {
		n.mu.Lock()
		defer n.mu.Unlock()

		if n.stopped || n.rollback != timer {
			return
		}

		n.rollback = nil
		n.active = previous

		if err := n.publishLocked(); err != nil {
			log.Printf("talossim: publishing rolled back config: %v", err)
		}
	})

	n.rollback = timer
}

// cancelRollbackLocked disarms a pending TRY-mode revert.
func (n *Node) cancelRollbackLocked() {
	if n.rollback != nil {
		n.rollback.Stop()
		n.rollback = nil
	}
}
