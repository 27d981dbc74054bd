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

// TestControllerRotatesCAsAndKeysOn1_14: the same on simulated Talos
// v1.14.1 nodes with configs of the v1.14 contract, which hold the
// Kubernetes CAs in KubeAPIServerCAConfig (its issuing and accepted CAs)
// rather than in cluster.ca and cluster.acceptedCAs; then the rotation
// that contract newly allows, of the service-account and secretbox keys.
func TestControllerRotatesCAsAndKeysOn1_14(t *testing.T) {
	d := itest.NewDemoClusterWith(t, itest.DemoSetup{TalosVersion: "v1.14.1", KubernetesVersion: "v1.37.0", RealEtcdSnapshots: true, Tune: itest.FastOperations})
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an admin rotates both CAs in Talos's three phases; kubectl works throughout", d.CARotation)
	t.Run("an admin rotates the service-account and secretbox keys; no Secret or token is lost before the drop", d.KubernetesKeyRotation)
}
