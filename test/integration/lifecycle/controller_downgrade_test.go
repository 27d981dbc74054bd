package lifecycle

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/operation"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/test/integration/itest"
)

// TestOperatorCannotDowngradeTalos: an operator creates and starts a
// talos-upgrade to a version older than the one a machine runs (a path
// machinery's table allows); the controller's reconciler, as its
// ServiceAccount, fails it before it touches a node, saying why.
func TestOperatorCannotDowngradeTalos(t *testing.T) {
	ctx := itest.APIContext(t)
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	m := itest.PinnedMachine(t, ns, "m1") // of TalosCluster prod
	olivia := itest.APIClientFor(t, itest.CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1()
	m, err := olivia.TalosMachines(ns).UpdateApproval(ctx, m.Name, itest.WithDecision(m, v1alpha1.ApprovalApproved, "racked"), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// It was configured, and runs v1.13.2 (as intake or an upgrade recorded).
	m.Status.Phase = v1alpha1.MachinePhaseReady
	m.Status.TalosVersion = "v1.13.2"
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: strings.Repeat("ab", 32), Effect: v1alpha1.ConfigEffectReboot, AppliedAt: metav1.Now()}
	if _, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	op := itest.APITalosOperation("downgrade", ns, v1alpha1.OperationTalosUpgrade)
	op.Spec.ClusterName = "prod"
	op.Spec.TalosUpgrade = &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}
	if _, err := olivia.TalosOperations(ns).Create(ctx, op, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := olivia.TalosOperations(ns).Start(ctx, op.Name, &v1alpha1.TalosOperation{}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	asController := itest.ControllerClient(t)
	r := &operation.Reconciler{Client: asController, APIReader: asController, Secrets: asController,
		Recorder: eventstest.New(t, 100), Now: time.Now}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: op.Name}}); err != nil {
		t.Fatal(err)
	}
	got, err := olivia.TalosOperations(ns).Get(ctx, op.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.OperationConditionSucceeded)
	if got.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
		!strings.Contains(c.Message, "m1") || !strings.Contains(c.Message, "v1.13.2") || len(got.Status.Steps) != 0 {
		t.Fatalf("an operator's downgrade: phase %s, condition %+v, steps %+v", got.Status.Phase, c, got.Status.Steps)
	}
}
