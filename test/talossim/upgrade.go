package talossim

import (
	"context"
	"fmt"
	"log"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// installerTag matches the version tag the simulator requires of an installer image: vX.Y.Z with an
// optional pre-release suffix.
var installerTag = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// installerVersion returns the Talos version an installer image reference (<repo>:vX.Y.Z) installs.
// A real node pulls and validates the image; the simulator only accepts references whose tag is the
// version.
func installerVersion(image string) (string, error) {
	i := strings.LastIndexByte(image, ':')
	if i <= 0 || strings.Contains(image[i+1:], "/") {
		return "", fmt.Errorf("image reference %q has no tag", image)
	}

	tag := image[i+1:]
	if !installerTag.MatchString(tag) {
		return "", fmt.Errorf("image tag %q is not a Talos version (vX.Y.Z)", tag)
	}

	return tag, nil
}

// Upgrade upgrades an installed node to the version of the installer image's tag. Without Stage the
// node goes through PhaseUpgrading (API up, Options.UpgradeDelay) and reboots into the new version.
// With Stage, like Talos, the node reboots right away and the staged image is installed during that
// boot, so the old version runs until the reboot. An installer that fails (installer.go) fails the
// upgrade sequence, which the events report, and the node reboots into the version it ran. On a control plane, unless Force, the etcd checks
// Talos makes first apply: a cluster must be reachable and must not have exactly two members.
func (s *machineServer) Upgrade(_ context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
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

	if !n.installed {
		return nil, status.Errorf(codes.FailedPrecondition, "Talos is not installed")
	}

	target, err := installerVersion(in.GetImage())
	if err != nil {
		return nil, fmt.Errorf("error validating installer image %q: %w", in.GetImage(), err)
	}

	if err = n.checkEtcdForUpgradeLocked(in.GetForce()); err != nil {
		return nil, err
	}

	resp := &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Ack: "Upgrade request received", ActorId: actorID}}}

	if in.GetStage() {
		// written to META before the reboot sequence is even attempted
		n.sw.staged, n.sw.stagedImage = target, in.GetImage()

		return resp, n.requestRebootLocked("stageUpgrade", actorID)
	}

	if n.sequence {
		return resp, nil // dropped, like machined's locked sequencer
	}

	gen := n.beginSequenceLocked()
	n.recordSequenceLocked("upgrade", actorID)

	if err = n.setPhaseLocked(PhaseUpgrading); err != nil {
		return nil, err
	}

	image := in.GetImage()

	n.wg.Go(func() {
		if !n.delay(n.opts.UpgradeDelay) {
			return
		}

		n.mu.Lock()
		if !n.currentLocked(gen) {
			n.mu.Unlock()

			return
		}

		// The installer fails the upgrade sequence, and machined reboots into the version installed.
		if run := n.runInstallerLocked(image, n.sw.running, true); run.failed() {
			log.Printf("talossim: the installer of %s failed with exit code %d: %s", image, run.code, run.last)
			n.sequenceFailedLocked("upgrade", n.upgradePhaseLocked(), run, actorID)
		} else {
			n.sw.installed, n.sw.installedImage = run.version, image
		}

		err := n.enterRebootLocked()
		n.mu.Unlock()

		if err != nil {
			log.Printf("talossim: rebooting after upgrade: %v", err)
		}

		n.finishReboot(gen)
	})

	return resp, nil
}

// checkEtcdForUpgradeLocked mirrors the pre-upgrade etcd validation of a control plane.
func (n *Node) checkEtcdForUpgradeLocked(force bool) error {
	if force || !n.configuredLocked() || !n.isControlPlaneLocked() {
		return nil
	}

	members := n.etcd.Members()

	switch {
	case len(members) == 0:
		return status.Errorf(codes.Unavailable, "failed to create etcd client: %s", status.Convert(errEtcdUnavailable).Message())
	case len(members) == 2:
		return fmt.Errorf("error validating etcd for upgrade: etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(members))
	}

	return nil
}
