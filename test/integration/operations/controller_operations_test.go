package operations

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerRunsOperations: day-2 operations on a Ready 3+2 cluster,
// started with kubectl as an operator (or an admin where the API says so)
// and run by the controller through the real machinery client: a rolling
// reboot, a Talos upgrade through ImageService.Pull and
// LifecycleService.Upgrade, a Kubernetes upgrade, an etcd defragmentation,
// the refusals and the faults. Each disruptive run is checked against the
// nodes' timestamped phase history: at most one node away at any moment, so
// the three control planes keep etcd's quorum.
func TestControllerRunsOperations(t *testing.T) {
	d := itest.NewOperationsCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an operator reboots the cluster one node at a time", d.RollingReboot)
	t.Run("an operator upgrades Talos one node at a time, and new configs follow", d.TalosUpgrade)
	t.Run("upgrades Talos refuses are refused with the reason, touching nothing", d.UpgradeRefusals)
	t.Run("Kubernetes upgrades Kubernetes refuses are refused before any step", d.KubernetesUpgradeRefusals)
	t.Run("an operator upgrades Kubernetes in talosctl upgrade-k8s's order", d.KubernetesUpgrade)
	t.Run("an operation naming a machine of another cluster fails at once", d.ForeignMachine)
	t.Run("etcd is defragmented one member at a time", d.EtcdDefrag)
	t.Run("a controller killed mid-upgrade resumes on the same step", d.UpgradeSurvivesRestart)
	t.Run("a node that refuses the upgrade fails only its step", d.UpgradeRefusedByNode)
	t.Run("a deleted operation stops after its step in flight", d.DeletedOperationStops)
	t.Run("a node that never comes back stops the rollout", d.NodeNeverBack)
	t.Run("an unhealthy cluster starts nothing unless an admin overrides", d.UnhealthyClusterWaits)
}
