package resets

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerShutsDownResetsAndReclaims: an admin powers off a worker,
// then the whole Ready 3+2 cluster (backed up to a volume first), and powers it on;
// resets nodes as Talos's wipe modes say and sees them rejoin; resets a
// foreign node and adds it; and reclaims a machine into another cluster.
func TestControllerShutsDownResetsAndReclaims(t *testing.T) {
	d := itest.NewOperationsCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an admin has the cluster backed up to a volume", d.BackUpToAVolume)
	t.Run("an admin shuts a worker, then the whole cluster down, and powers it on", d.Shutdowns)
	t.Run("an admin resets nodes as Talos's wipe modes say, and they rejoin", d.NodeResets)
	t.Run("an admin resets and adds a foreign node, and reclaims a machine into another cluster", d.Reclaims)
}
