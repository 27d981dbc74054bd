package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/talossim"
)

// NewUpgradeCluster is the demo cluster of Talos v1.13.0 (Kubernetes
// v1.36.0, which v1.14 runs too) whose nodes can pull the installer of
// target, with the operations cluster's fast controller.
func NewUpgradeCluster(t *testing.T, target string) *DemoCluster {
	registry := talossim.NewRegistry("siderolabs/installer:v1.13.0", "siderolabs/installer:"+target)
	return NewDemoClusterWith(t, DemoSetup{Registry: registry, Tune: func(o *ctrlcmd.Options) {
		o.InstallImage = "siderolabs/installer:v1.13.0"
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = OperationStepTimeout
	}})
}

// UpgradeTo: an operator upgrades Talos to version as upgrades run, one
// control plane at a time (each node's phases say so), every node rebooted
// once, and every machine reports it.
func (d *DemoCluster) UpgradeTo(version string) func(t *testing.T) {
	return func(t *testing.T) {
		name := "upgrade-" + strings.ReplaceAll(strings.TrimPrefix(version, "v"), ".", "-")
		before, since := d.Reboots(), time.Now()
		d.CreateOperation(t, Operator, name, fmt.Sprintf("clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: %s}", version))
		d.StartOperation(t, Operator, name)
		d.WaitOperationEnds(t, name, v1alpha1.OperationSucceeded)
		for node, v := range d.Versions() {
			if v != version {
				t.Errorf("%s runs Talos %s after the upgrade", node, v)
			}
		}
		if most, when := MostAwayAtOnce(d.ControlPlaneNodes(), since); most != 1 {
			t.Errorf("at most %d control planes were away at once (%s), want exactly 1", most, when)
		}
		RebootedOnce(t, before, d.Reboots())
		for n := range d.Nodes {
			WaitMachine(d.Ctx, t, d.Ns, n, "reports Talos "+version, func(m *v1alpha1.TalosMachine) bool { return m.Status.TalosVersion == version })
		}
		WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
		// The cluster may be Ready before it looked at the machines' versions.
		var c *v1alpha1.TalosCluster
		if err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, ControllerWait, true, func(context.Context) (bool, error) {
			c = GetCluster(t, d.Ns, "demo")
			return c.Status.TalosVersion == version, nil
		}); err != nil || c.Spec.TalosVersion == version {
			t.Errorf("after the upgrade: spec.talosVersion %s (the contract stays), status.talosVersion %s (want %s)", c.Spec.TalosVersion, c.Status.TalosVersion, version)
		}
	}
}

// MoveContractTo: an admin moves the cluster's spec.talosVersion (its
// version contract) to version: every machine's config rolls out in that
// version's layout, at most one control plane away at once, and the
// cluster is Ready again.
func (d *DemoCluster) MoveContractTo(version string) func(t *testing.T) {
	return func(t *testing.T) {
		since := time.Now()
		hashes := map[string]string{}
		for _, n := range d.Names {
			hashes[n] = GetMachine(t, d.Ns, n).Status.AppliedConfig.Hash
		}
		MustKubectl(d.Ctx, t, append(Admin, "-n", d.Ns, "patch", "taloscluster", "demo", "--type=merge",
			"-p", fmt.Sprintf(`{"spec":{"talosVersion":%q}}`, version))...)
		d.TalosVersion = version
		for _, n := range d.Names {
			WaitMachine(d.Ctx, t, d.Ns, n, "has its config of the new contract applied", func(m *v1alpha1.TalosMachine) bool {
				return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != hashes[n] &&
					HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
			})
		}
		WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
		contract := version[:strings.LastIndex(version, ".")]
		c := WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionConfigContract, metav1.ConditionTrue, v1alpha1.ClusterReasonContractCurrent)
		if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionConfigContract); !strings.Contains(cond.Message, contract) {
			t.Errorf("ConfigContract does not name the %s contract: %s", contract, cond.Message)
		}
		for _, n := range d.Names {
			if got := GetMachine(t, d.Ns, n).Status.AppliedConfig.Contract; got != contract {
				t.Errorf("%s runs a config of the %q contract, want %s", n, got, contract)
			}
		}
		if most, when := MostAwayAtOnce(d.ControlPlaneNodes(), since); most > 1 {
			t.Errorf("%d control planes were away at once (%s), want at most 1", most, when)
		}
	}
}
