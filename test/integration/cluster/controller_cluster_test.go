package cluster

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerBuildsACluster drives three control planes and two workers
// from kubectl apply to a Ready cluster as an ichor:operator, through the
// controller and the real machinery client to simulated nodes that start a
// real Kubernetes control plane when bootstrapped; then patches it, deletes
// machines, and adds one back. Beside it, a rejected machine is never
// configured and an impostor at an approved machine's pinned address is
// sent nothing. The steps run in this order and build on each other; each
// is a method of itest.DemoCluster.
func TestControllerBuildsACluster(t *testing.T) {
	d := itest.NewDemoCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("every node's config is of the v1.13 layout, read with talosctl v1.13.0", d.ConfigsOfItsLayout)
	t.Run("a no-reboot patch applies everywhere without a reboot", d.NoRebootPatch)
	t.Run("a reboot-required patch reboots one node at a time", d.RebootPatch)
	t.Run("a bad patch reports its error and changes nothing", d.BadPatch)
	t.Run("a patch that encrypts the system disk waits for a node-reset", d.EncryptionPatch)
	t.Run("a controller restarted mid-rollout resumes without repeating or skipping a step", d.RestartMidRollout)
	t.Run("deleting a control plane that would cost etcd its quorum is refused", d.QuorumKeepsControlPlanes)
	t.Run("the bootstrap token authenticates nobody once every machine joined", d.BootstrapTokenClosed)
	t.Run("deleting a machine resets its node first", d.DeleteResetsNode)
	t.Run("the bootstrap token authenticates only while a machine joins", d.BootstrapTokenWhileJoining)
	t.Run("a reboot-required patch and a control plane's deletion at once take one node away at a time", d.RebootAndDeleteAtOnce)
	t.Run("a rejected machine is never configured", d.RejectedNeverConfigured)
	t.Run("an impostor at a pinned address is sent nothing", d.ImpostorSentNothing)
	t.Run("every status writer owns only its row of the table of status writers", d.StatusWritersKeepToTheirRows)
}
