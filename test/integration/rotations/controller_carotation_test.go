package rotations

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerRotatesCAs: an admin rotates a Ready 3+2 cluster's Talos
// and Kubernetes CAs in Talos's three phases, every node through each phase
// one at a time, while kubectl keeps working.
func TestControllerRotatesCAs(t *testing.T) {
	d := itest.NewOperationsCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an admin rotates both CAs in Talos's three phases; kubectl works throughout", d.CARotation)
}
