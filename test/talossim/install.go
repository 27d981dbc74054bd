package talossim

import (
	"context"
	"log"

	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// What a failed installer (installer.go) does to an install depends on what runs it:
//
//   - The install sequence, which installs a config with machine.install applied in maintenance mode
//     (every install before Talos v1.14), fails; machined treats that as fatal and reboots, and the
//     machine comes back from its boot media, in maintenance mode without the config.
//   - From v1.14, a config with an UnattendedInstallConfig document is installed by the
//     UnattendedInstallController instead: a failure is recorded in the UnattendedInstallStatus
//     resource (phase failed, with the error), the node stays up, installing, and the controller
//     retries. The simulator retries when the faults change, as only they change the outcome.
//   - A staged upgrade is installed by the install sequence of the next boot, which fails the same way;
//     machined has dropped the staged upgrade from META as it read it, so the reboot that follows
//     boots the version installed before.
//
// Either way the version changes only with the reboot that follows a successful install.

// install runs the installer of the config applied in maintenance mode (the boot media's own when the
// config names no installer, or one whose tag is not a version), then reboots into it.
func (n *Node) install(gen uint64) {
	n.mu.Lock()

	if !n.currentLocked(gen) {
		n.mu.Unlock()

		return
	}

	image := installerImageOf(n.active)
	run := installerRun{version: n.sw.running}

	if _, err := installerVersion(image); err == nil {
		run = n.runInstallerLocked(image, n.sw.running, false)
	} else {
		image = ""
	}

	if run.failed() && n.unattendedLocked() {
		n.unattendedFailedLocked(gen, run)
		n.mu.Unlock()

		return
	}

	if run.failed() {
		log.Printf("talossim: the installer of %s failed with exit code %d: %s", image, run.code, run.last)
		n.sequenceFailedLocked("install", installPhase, run, "")
	} else {
		n.installed = true
		n.sw.installed, n.sw.installedImage = run.version, image

		if n.unattendedLocked() {
			n.setUnattendedLocked(runtime.UnattendedInstallPhaseWaitingForReboot, "")
		}
	}

	err := n.enterRebootLocked()
	n.mu.Unlock()

	if err != nil {
		log.Printf("talossim: entering reboot after install: %v", err)
	}

	n.finishReboot(gen)
}

// unattendedLocked reports whether the UnattendedInstallController installs the active config: Talos
// v1.14 and later, a config with an UnattendedInstallConfig document.
func (n *Node) unattendedLocked() bool {
	return !runsUpTo1_13(n.sw.running) && n.active != nil && n.active.UnattendedInstallConfig() != nil
}

// startUnattendedLocked records an unattended install starting.
func (n *Node) startUnattendedLocked() {
	n.unattended = nil

	if n.unattendedLocked() {
		n.setUnattendedLocked(runtime.UnattendedInstallPhaseInstalling, "")
	}
}

// bootUnattendedLocked is the UnattendedInstallStatus of a boot: installed when the controller finds
// the machine installed, none without its document.
func (n *Node) bootUnattendedLocked() {
	n.unattended = nil

	if n.installed && n.configuredLocked() && n.unattendedLocked() {
		n.setUnattendedLocked(runtime.UnattendedInstallPhaseInstalled, "")
	}
}

// setUnattendedLocked records the unattended install's phase and error, for the installer the active
// config names.
func (n *Node) setUnattendedLocked(phase runtime.UnattendedInstallPhase, err string) {
	n.unattended = &runtime.UnattendedInstallStatusSpec{Image: n.active.UnattendedInstallConfig().InstallerImage(), Phase: phase, Error: err}
}

// unattendedFailedLocked records a failed unattended install. The node stays installing, with no
// sequence holding it (a reboot or a reset may be asked for), and installs again once the faults change.
func (n *Node) unattendedFailedLocked(gen uint64, run installerRun) {
	log.Printf("talossim: the unattended install failed: %s", run.last)

	n.setUnattendedLocked(runtime.UnattendedInstallPhaseFailed, run.taskError())
	n.sequence = false

	if err := n.publishLocked(); err != nil {
		log.Printf("talossim: publishing the failed install: %v", err)
	}

	faults, phase := n.faultsChangedLocked(), n.changed

	n.wg.Go(func() {
		select {
		case <-faults:
		case <-phase:
			return // the node moved on (rebooted, was reset or powered off)
		case <-n.stopCh:
			return
		}

		n.mu.Lock()
		retry := n.currentLocked(gen) && n.phase == PhaseInstalling && n.unattendedLocked()

		if retry {
			n.sequence = true
			n.setUnattendedLocked(runtime.UnattendedInstallPhaseInstalling, "")

			if err := n.publishLocked(); err != nil {
				log.Printf("talossim: publishing the install retry: %v", err)
			}
		}
		n.mu.Unlock()

		if retry && n.delay(n.opts.InstallDelay) {
			n.install(gen)
		}
	})
}

// installStagedLocked installs a staged upgrade at the start of a boot, and reports whether the boot
// goes on. When its installer fails, the boot fails and the node reboots into the version installed.
func (n *Node) installStagedLocked() bool {
	version, image := n.sw.staged, n.sw.stagedImage
	n.sw.staged, n.sw.stagedImage = "", ""

	if !n.installed || version == "" {
		return true
	}

	host := n.sw.installed
	if host == "" {
		host = n.opts.Version
	}

	run := installerRun{version: version}
	if image != "" {
		run = n.runInstallerLocked(image, host, true)
	}

	if !run.failed() {
		n.sw.installed, n.sw.installedImage = run.version, image

		return true
	}

	log.Printf("talossim: the staged upgrade failed (exit code %d: %s); rebooting", run.code, run.last)

	if err := n.setPhaseLocked(PhaseRebooting); err != nil {
		log.Printf("talossim: rebooting after the failed staged upgrade: %v", err)
	}

	gen := n.seqGen
	n.wg.Go(func() { n.finishReboot(gen) })

	return false
}

// publishUnattended writes the UnattendedInstallStatus, or removes it when the node has none.
func publishUnattended(ctx context.Context, st state.State, spec *runtime.UnattendedInstallStatusSpec) error {
	r := runtime.NewUnattendedInstallStatus()

	if spec == nil {
		return removeResource(ctx, st, r.Metadata())
	}

	*r.TypedSpec() = *spec

	return putResource(ctx, st, r)
}
