package versions

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerBuildsAV1_14Cluster builds a cluster of the v1.14 contract
// on simulated Talos v1.14.1 nodes: its configs are laid out as v1.14 has
// them (Kubernetes in documents of its own), the official talosctl v1.14.1
// reads each of them, and patches roll out as on v1.13, a change that
// needs a reboot staged and the node rebooted, one at a time.
func TestControllerBuildsAV1_14Cluster(t *testing.T) {
	d := itest.NewDemoClusterWith(t, itest.DemoSetup{TalosVersion: "v1.14.1", KubernetesVersion: "v1.37.0"})
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("every node's config is of the v1.14 layout, read with talosctl v1.14.1", d.ConfigsOfItsLayout)
	t.Run("the cluster trusts the OpenID provider through KubeAuthenticationConfig; people reach it as themselves", d.OIDCTrust)
	t.Run("an admin gives it a schematic from an image factory: installers change without a reboot", d.ImageFactorySchematic)
	t.Run("a talos-upgrade to the version it runs installs the factory's image, one node at a time", d.SchematicUpgrade)
	t.Run("a no-reboot patch applies everywhere without a reboot", d.NoRebootPatch)
	t.Run("a reboot-required patch reboots one node at a time", d.RebootPatch)
}

// TestUpgradeA1_13ClusterTo1_14 upgrades a v1.13 cluster to Talos v1.14.1
// as upgrades run, one control plane at a time; the cluster keeps its v1.13
// contract (valid on v1.14 nodes), which talosctl v1.14.1 reads on every
// node, until an admin moves spec.talosVersion to v1.14: its configs then
// roll out in the v1.14 layout.
func TestUpgradeA1_13ClusterTo1_14(t *testing.T) {
	d := itest.NewUpgradeCluster(t, "v1.14.1")
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an operator upgrades Talos to v1.14.1, one control plane at a time", d.UpgradeTo("v1.14.1"))
	t.Run("the configs keep the v1.13 layout, read with talosctl v1.14.1", d.ConfigsOfItsLayout)
	t.Run("an admin moves the contract to v1.14: the v1.14 layout rolls out", d.MoveContractTo("v1.14.1"))
	t.Run("every node's config is of the v1.14 layout", d.ConfigsOfItsLayout)
}
