package talossim

import (
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// The installer is a container of the installer image, run by machined for every install and upgrade:
// LifecycleService.Upgrade streams its output and exit code to the caller; the install sequence (an
// install from maintenance mode with machine.install, a staged upgrade at boot) and the legacy
// MachineService.Upgrade sequence fail with "task "upgrade" failed: exit code N"; from v1.14 an install
// driven by an UnattendedInstallConfig records the failure in its UnattendedInstallStatus (install.go).
//
// Its exit code is the installer's, so the installer image's release decides it, not the node's: up to
// v1.13 any failure exits 1; from v1.14 the code says what failed (constants.Exit*, resolved by
// pkg/installer/exitcode): a failed pre-flight check is an environment error (4), a failure while
// writing the system disk an install error (7). Whatever fails, nothing is written to the disk.

// installerRun is one run of an installer: what it prints before its work, its last line (the result,
// or the error it exits with) and its exit code.
type installerRun struct {
	version string // the Talos version it installs; "" when the image names none
	lines   []string
	last    string
	code    int32
}

// failed reports whether the installer exited non-zero.
func (r installerRun) failed() bool {
	return r.code != constants.ExitSuccess
}

// taskError is the error RunInstallerContainer returns for the run, which machined's sequences and
// controllers report.
func (r installerRun) taskError() string {
	return fmt.Sprintf("task %q failed: exit code %d", "upgrade", r.code)
}

// installerLine is a line the installer logs: Go's standard logger prefixes the time.
func installerLine(format string, args ...any) string {
	return time.Now().Format("2006/01/02 15:04:05 ") + fmt.Sprintf(format, args...)
}

// runInstallerLocked runs the installer of image on the node, which runs host. An upgrade's installer
// first checks that host may be upgraded to its version (machinery's compatibility table); then the
// faults say whether writing the system disk fails: Faults.InstallerFails for this image, and
// Faults.UpgradeFails for any upgrade.
func (n *Node) runInstallerLocked(image, host string, upgrade bool) installerRun {
	target, err := installerVersion(image)
	if err != nil {
		// A real node runs whatever the image holds; the simulator needs the version in the tag.
		return installerRun{last: err.Error(), code: constants.ExitUnknownError}
	}

	run := installerRun{version: target, lines: []string{installerLine("running Talos installer %s", target)}}

	if upgrade {
		run.lines = append(run.lines, installerLine("running pre-flight checks"), installerLine("host Talos version: %s", host))

		if err = upgradeableFrom(target, host); err != nil {
			run.last, run.code = "pre-flight checks failed: "+err.Error(), installerExitCode(target, constants.ExitEnvironment)

			return run
		}

		run.lines = append(run.lines, installerLine("all pre-flight checks successful"))
	}

	fault := n.faults.set.InstallerFails[image]
	if fault == "" && upgrade {
		fault = n.faults.set.UpgradeFails
	}

	if fault != "" {
		run.last, run.code = fault, installerExitCode(target, constants.ExitInstall)

		return run
	}

	run.last = installerLine("installation of %s complete", target)

	return run
}

// installerExitCode is the code the installer of release target exits with for a failure of category
// code: Talos v1.14 installers tell the categories apart, older ones exit 1.
func installerExitCode(target string, code int) int32 {
	if runsUpTo1_13(target) {
		return constants.ExitUnknownError
	}

	return int32(code) //nolint:gosec // the small constants.Exit* codes
}

// sequenceFailedLocked records what machined's controller publishes when a sequence fails in a task:
// the sequence's stop, then a fatal error, on which machined reboots the node (after a 10-second
// countdown the simulator does not wait for). phase is the failed phase's number in the sequence.
func (n *Node) sequenceFailedLocked(sequence string, phase int, run installerRun, actorID string) {
	n.events.add(&machine.SequenceEvent{Sequence: sequence, Action: machine.SequenceEvent_STOP}, actorID)
	n.events.add(&machine.SequenceEvent{
		Sequence: sequence,
		Action:   machine.SequenceEvent_NOOP,
		Error: &common.Error{
			Code:    common.Code_FATAL,
			Message: fmt.Sprintf("sequence failed: error running phase %d in %s sequence: task 1/1: failed, %s", phase, sequence, run.taskError()),
		},
	}, actorID)
}

// upgradePhaseLocked is the number of the upgrade phase, the one that runs the installer, in the upgrade
// sequence of the running release: after draining (unless the kubelet skips node registration), stopping
// the services and unmounting the volumes, whose phases v1.14 has more of.
func (n *Node) upgradePhaseLocked() int {
	phase := 13 // denyNewServices drain cleanup preShutdown dbus stopContainers stopServices unmount unmountBind unmountPromotable unmountSystem volumeFinalize upgrade
	if runsUpTo1_13(n.sw.running) {
		phase = 9 // drain cleanup dbus stopServices unmount unmountBind unmountSystem volumeFinalize upgrade
	}

	if cfg := n.active; cfg != nil && cfg.K8sNodeConfig() != nil && cfg.K8sNodeConfig().SkipNodeRegistration() {
		phase-- // no drain
	}

	return phase
}

// installPhase is the number of the install phase in the install sequence (env, install).
const installPhase = 2
