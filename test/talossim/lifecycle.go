package talossim

import (
	"log"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

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

// startInstallLocked activates cfg applied in maintenance mode and runs install → reboot → boot.
func (n *Node) startInstallLocked(cfg config.Provider) error {
	n.active, n.persisted = cfg, cfg
	n.sequence = true

	if err := n.setPhaseLocked(PhaseInstalling); err != nil {
		return err
	}

	n.replaceAPILocked(false)

	n.wg.Go(func() {
		if !n.delay(n.opts.InstallDelay) {
			return
		}

		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()

			return
		}

		n.installed = true
		err := n.enterRebootLocked()
		n.mu.Unlock()

		if err != nil {
			log.Printf("talossim: entering reboot after install: %v", err)
		}

		n.finishReboot()
	})

	return nil
}

// requestRebootLocked starts a reboot unless an install or reboot sequence is already running (that one
// will boot the persisted config anyway).
func (n *Node) requestRebootLocked() error {
	if n.stopped {
		return errNodeStopped
	}

	if n.sequence {
		return nil
	}

	n.sequence = true

	if err := n.enterRebootLocked(); err != nil {
		return err
	}

	n.wg.Go(n.finishReboot)

	return nil
}

// enterRebootLocked takes the API down and marks the node rebooting; a pending TRY revert dies with the boot.
func (n *Node) enterRebootLocked() error {
	n.cancelRollbackLocked()
	n.replaceAPILocked(true)

	return n.setPhaseLocked(PhaseRebooting)
}

// finishReboot waits RebootDelay, then boots: the persisted config becomes active; a node without an
// installed config comes back in maintenance mode.
func (n *Node) finishReboot() {
	if !n.delay(n.opts.RebootDelay) {
		return
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	if n.stopped {
		return
	}

	if !n.installed {
		n.persisted = nil // nothing was written to disk
	}

	n.active = n.persisted
	n.sequence = false

	next := PhaseMaintenance
	if n.installed && n.configuredLocked() {
		next = PhaseRunning
	}

	if err := n.setPhaseLocked(next); err != nil {
		log.Printf("talossim: publishing boot state: %v", err)
	}

	n.replaceAPILocked(false)
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
