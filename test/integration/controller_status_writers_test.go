package integration

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/controller/machineconfig"
)

// TestStatusWritersInterleave: the machine config reconciler writes its
// status from a copy read before an admin granted an override and the
// approver recorded a kubelet serving certificate; neither is lost, and
// nor are its own fields.
func TestStatusWritersInterleave(t *testing.T) {
	ctx := t.Context()
	installControllerRBAC(ctx, t)
	useProvisioningNetworks(ctx, t, "127.0.7.0/24")
	ns := cp.Namespace(t)
	mustApply(ctx, t, `
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: m1, namespace: `+ns+`}
spec: {clusterName: demo, role: worker, address: "127.0.7.1:50000", install: {disk: /dev/sda}}
`)
	scheme, err := ctrlcmd.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	asController, err := client.New(cp.ConfigFor(controllerUser, controllerGroups...), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var stale v1alpha1.TalosMachine
	if err := asController.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m1"}, &stale); err != nil {
		t.Fatal(err)
	}

	// Meanwhile: an admin grants an override; the approver records a certificate.
	admins := apiClientFor(t, cp.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosMachines(ns)
	if _, err := admins.Override(ctx, "m1", &v1alpha1.Override{Check: v1alpha1.CheckControlPlaneQuorum, Reason: "node is gone"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issued := metav1.NewTime(time.Now().Truncate(time.Second))
	var fresh v1alpha1.TalosMachine
	if err := asController.Get(ctx, client.ObjectKeyFromObject(&stale), &fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Status.KubeletServingCertificate = &v1alpha1.KubeletServingCertificateStatus{Request: "csr-1", IssuedAt: &issued, NotAfter: &issued}
	if err := asController.Status().Update(ctx, &fresh); err != nil {
		t.Fatal(err)
	}

	// The machine config reconciler writes from its old copy.
	hash := strings.Repeat("ab", 32)
	stale.Status.NodeName = "m1"
	stale.Status.Phase = v1alpha1.MachinePhaseConfiguring
	stale.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: hash, Effect: v1alpha1.ConfigEffectReboot, AppliedAt: issued}
	meta.SetStatusCondition(&stale.Status.Conditions, metav1.Condition{Type: v1alpha1.MachineConditionConfigApplied, Status: metav1.ConditionTrue,
		Reason: v1alpha1.MachineReasonInstalled, Message: "installed", LastTransitionTime: issued})
	if err := machineconfig.WriteStatus(ctx, asController, &stale); err != nil {
		t.Fatal(err)
	}

	got, err := admins.Get(ctx, "m1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o := got.Status.Override; o == nil || o.Check != v1alpha1.CheckControlPlaneQuorum || o.By != "carol" {
		t.Errorf("the admin's override grant was lost: %+v", o)
	}
	if c := got.Status.KubeletServingCertificate; c == nil || c.Request != "csr-1" {
		t.Errorf("the approver's certificate record was lost: %+v", c)
	}
	if got.Status.NodeName != "m1" || got.Status.AppliedConfig == nil || got.Status.AppliedConfig.Hash != hash ||
		!hasCondition(got.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonInstalled) {
		t.Errorf("the reconciler's own fields: %+v", describeStatus(got))
	}
	managers := map[string]bool{}
	for _, f := range got.ManagedFields {
		managers[f.Manager] = true
	}
	if !managers[machineconfig.FieldManager] {
		t.Errorf("managed fields name no %s: %v", machineconfig.FieldManager, managers)
	}
}
