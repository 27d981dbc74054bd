package operation

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestUpgradeRefusesADowngrade: a talos-upgrade to a version older than one
// its machines run fails before any node is touched, though machinery's
// table allows the path; a machine whose status lags (the node runs newer
// than it shows) fails its own step before anything is pulled.
func TestUpgradeRefusesADowngrade(t *testing.T) {
	if err := upgradePath("v1.13.2", "v1.13.1", false); err == nil || !strings.Contains(err.Error(), "does not downgrade") {
		t.Errorf("upgradePath from v1.13.2 to v1.13.1: %v", err)
	}
	downgrade := func() *v1alpha1.TalosOperation {
		return started("downgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
			TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}})
	}

	t.Run("machine status", func(t *testing.T) {
		f := newFixture(t, downgrade())
		var m v1alpha1.TalosMachine
		if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "worker-1"}, &m); err != nil {
			t.Fatal(err)
		}
		m.Status.TalosVersion = "v1.13.2"
		if err := f.client.Status().Update(context.Background(), &m); err != nil {
			t.Fatal(err)
		}
		f.node("worker-1").TalosVersion = "v1.13.2"
		op := f.run("downgrade")
		c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
		if op.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
			!strings.Contains(c.Message, "worker-1") || !strings.Contains(c.Message, "v1.13.2") || len(op.Status.Steps) != 0 {
			t.Errorf("phase %s, condition %+v, steps %v", op.Status.Phase, c, stepMachines(op))
		}
		for _, name := range machineNames {
			if n := f.node(name); n.Boots != 0 || n.TalosVersion == "v1.13.1" {
				t.Errorf("%s booted %d times, runs %q", name, n.Boots, n.TalosVersion)
			}
		}
	})

	t.Run("an admin's override", func(t *testing.T) {
		ctx := context.Background()
		f := newFixture(t, downgrade())
		var m v1alpha1.TalosMachine
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "worker-1"}, &m); err != nil {
			t.Fatal(err)
		}
		m.Status.TalosVersion = "v1.13.2"
		if err := f.client.Status().Update(ctx, &m); err != nil {
			t.Fatal(err)
		}
		f.node("worker-1").TalosVersion = "v1.13.2"
		var c v1alpha1.TalosCluster
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
			t.Fatal(err)
		}
		c.Status.Override = &v1alpha1.OverrideStatus{Check: v1alpha1.CheckTalosDowngrade, Reason: "v1.13.2 breaks our NICs", By: "carol", At: metav1.Now()}
		if err := f.client.Status().Update(ctx, &c); err != nil {
			t.Fatal(err)
		}
		op := f.run("downgrade")
		if op.Status.Phase != v1alpha1.OperationSucceeded || f.node("worker-1").TalosVersion != "v1.13.1" {
			t.Fatalf("phase %s, worker-1 runs %s, steps %+v", op.Status.Phase, f.node("worker-1").TalosVersion, op.Status.Steps)
		}
		if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionDowngradeOverridden); c == nil || !strings.Contains(c.Message, "carol") {
			t.Errorf("TalosDowngradeOverridden %+v", c)
		}
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil || c.Status.Override != nil {
			t.Errorf("the override after use: %+v, %v", c.Status.Override, err)
		}
	})

	t.Run("node", func(t *testing.T) {
		f := newFixture(t, downgrade())
		f.node("cp-1").TalosVersion = "v1.13.2" // its machine's status does not say
		op := f.run("downgrade")
		if op.Status.Phase != v1alpha1.OperationFailed || len(op.Status.Steps) == 0 || op.Status.Steps[0].Machine != "cp-1" ||
			op.Status.Steps[0].Phase != v1alpha1.OperationFailed || !strings.Contains(op.Status.Steps[0].Message, "does not downgrade") {
			t.Fatalf("phase %s, steps %+v", op.Status.Phase, op.Status.Steps)
		}
		for _, name := range machineNames {
			if n := f.node(name); n.Boots != 0 || slices.ContainsFunc(n.Calls, func(c string) bool {
				return strings.HasPrefix(c, "pull ") || strings.HasPrefix(c, "upgrade ")
			}) {
				t.Errorf("%s booted %d times, was asked %v", name, n.Boots, n.Calls)
			}
		}
	})
}
