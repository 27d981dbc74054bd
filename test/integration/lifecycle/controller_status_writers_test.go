package lifecycle

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/taloscluster"
	"ichor.dev/ichor/pkg/disruption"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/test/integration/itest"
)

// TestStatusWritersInterleave: the machine config reconciler writes its
// status from a copy read before an admin granted an override and the
// approver recorded a kubelet serving certificate; neither is lost, and
// nor are its own fields.
func TestStatusWritersInterleave(t *testing.T) {
	ctx := t.Context()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.7.0/24")
	ns := itest.CP.Namespace(t)
	itest.MustApply(ctx, t, `
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: m1, namespace: `+ns+`}
spec: {clusterName: demo, role: worker, address: "127.0.7.1:50000", install: {disk: /dev/sda}}
`)
	asController := itest.ControllerClient(t)
	var stale v1alpha1.TalosMachine
	if err := asController.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m1"}, &stale); err != nil {
		t.Fatal(err)
	}

	// Meanwhile: an admin grants an override; the approver records a certificate.
	admins := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosMachines(ns)
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
	if err := configstatus.WriteStatus(ctx, asController, &stale); err != nil {
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
		!itest.HasCondition(got.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonInstalled) {
		t.Errorf("the reconciler's own fields: %+v", itest.DescribeStatus(got))
	}
	managers := map[string]bool{}
	for _, f := range got.ManagedFields {
		managers[f.Manager] = true
	}
	if !managers[configstatus.FieldManager] {
		t.Errorf("managed fields name no %s: %v", configstatus.FieldManager, managers)
	}
}

// TestClusterStatusWritersInterleave is the same for a TalosCluster, which
// four writers share: the cluster reconciler, the secrets reconciler, the
// disruption budget and an admin's override grant. Each writes from the copy
// it has; none loses another's field, and the budget is freed only by its
// holder.
func TestClusterStatusWritersInterleave(t *testing.T) {
	ctx := t.Context()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.7.0/24")
	ns := itest.CP.Namespace(t)
	itest.MustApply(ctx, t, `
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: demo, namespace: `+ns+`}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "https://127.0.7.1:6443"}, paused: true}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: m1, namespace: `+ns+`}
spec: {clusterName: demo, role: worker, address: "127.0.7.1:50000", install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: m2, namespace: `+ns+`}
spec: {clusterName: demo, role: worker, address: "127.0.7.2:50000", install: {disk: /dev/sda}}
`)
	asController := itest.ControllerClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "demo"}
	var stale v1alpha1.TalosCluster
	if err := asController.Get(ctx, key, &stale); err != nil {
		t.Fatal(err)
	}
	var m1, m2 v1alpha1.TalosMachine
	for name, m := range map[string]*v1alpha1.TalosMachine{"m1": &m1, "m2": &m2} {
		if err := asController.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			t.Fatal(err)
		}
	}

	// Meanwhile: m1 takes the disruption budget; an admin grants an override.
	budget := &disruption.Budget{Client: asController, Reader: asController}
	if holder, err := budget.Acquire(ctx, &m1, v1alpha1.DisruptionReboot); err != nil || holder != nil {
		t.Fatalf("m1 takes the budget: holder %v, %v", holder, err)
	}
	admins := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(ns)
	if _, err := admins.Override(ctx, "demo", &v1alpha1.Override{Check: v1alpha1.CheckBootstrapWaitsForControlPlanes, Reason: "cp-3 is gone"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The cluster reconciler and the secrets reconciler write from the old copy.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	stale.Status.Phase = v1alpha1.ClusterPhaseProvisioning
	stale.Status.ObservedGeneration = stale.Generation
	stale.Status.Machines = v1alpha1.MachineCounts{Total: 2, Workers: 2}
	meta.SetStatusCondition(&stale.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionMachinesReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ClusterReasonMachinesNotReady, Message: "0 of 2", LastTransitionTime: now})
	if err := taloscluster.WriteStatus(ctx, asController, &stale); err != nil {
		t.Fatal(err)
	}
	obj := ichorac.TalosCluster("demo", ns).WithStatus(ichorac.TalosClusterStatus().WithConditions(
		metav1ac.Condition().WithType(v1alpha1.ClusterConditionSecretsReady).WithStatus(metav1.ConditionTrue).
			WithReason(v1alpha1.ClusterReasonGenerated).WithMessage("generated").WithLastTransitionTime(now)))
	if err := asController.Status().Apply(ctx, obj, client.FieldOwner(clustersecrets.FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	// m2, which does not hold the budget, gives it back: nothing happens.
	if err := budget.Release(ctx, &m2); err != nil {
		t.Fatal(err)
	}

	got, err := admins.Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Status.Disruption; d == nil || d.MachineUID != m1.UID {
		t.Errorf("m1's disruption budget was lost: %+v", d)
	}
	if o := got.Status.Override; o == nil || o.By != "carol" {
		t.Errorf("the admin's override grant was lost: %+v", o)
	}
	if got.Status.Phase != v1alpha1.ClusterPhaseProvisioning || got.Status.Machines.Total != 2 ||
		!itest.HasCondition(got.Status.Conditions, v1alpha1.ClusterConditionMachinesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonMachinesNotReady) ||
		!itest.HasCondition(got.Status.Conditions, v1alpha1.ClusterConditionSecretsReady, metav1.ConditionTrue, v1alpha1.ClusterReasonGenerated) {
		t.Errorf("the reconcilers' own fields: phase %s, machines %+v, conditions %+v", got.Status.Phase, got.Status.Machines, got.Status.Conditions)
	}

	// Its holder gives the budget back, from a copy of m1 of its own.
	if err := budget.Release(ctx, &m1); err != nil {
		t.Fatal(err)
	}
	if got, err = admins.Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got.Status.Disruption != nil || got.Status.Override == nil || got.Status.Phase != v1alpha1.ClusterPhaseProvisioning {
		t.Errorf("after the release: disruption %+v, override %+v, phase %s", got.Status.Disruption, got.Status.Override, got.Status.Phase)
	}
}

// TestResetHandsConditionsBackToIntake: after a node-reset repinned a
// machine, the machine config reconciler wrote intake's two conditions from
// its own view (it owns them while the machine has a config) before the
// operation forgot the config. Forgetting it hands the conditions back to
// intake whole: no condition is left without its reason, and the write
// succeeds.
func TestResetHandsConditionsBackToIntake(t *testing.T) {
	ctx := t.Context()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.7.0/24")
	ns := itest.CP.Namespace(t)
	itest.MustApply(ctx, t, `
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: m1, namespace: `+ns+`}
spec: {clusterName: demo, role: worker, address: "127.0.7.1:50000", install: {disk: /dev/sda}}
`)
	asController := itest.ControllerClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "m1"}
	get := func() *v1alpha1.TalosMachine {
		t.Helper()
		var m v1alpha1.TalosMachine
		if err := asController.Get(ctx, key, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	set := func(m *v1alpha1.TalosMachine, condType string, status metav1.ConditionStatus, reason string) {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: condType, Status: status, Reason: reason,
			Message: reason, ObservedGeneration: m.Generation, LastTransitionTime: at})
	}

	// Intake pins the certificate the node presents after its reset.
	m := get()
	m.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: strings.Repeat("A", 43) + "=", SeenAt: at}
	set(m, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonPinnedAfterReset)
	set(m, v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonContacted)
	if err := intake.WriteStatus(ctx, asController, m); err != nil {
		t.Fatal(err)
	}

	// The machine config reconciler, whose copy still has the config, finds
	// the node unreachable over its configured API.
	m = get()
	m.Status.Phase = v1alpha1.MachinePhaseReady
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: strings.Repeat("ab", 32), Effect: v1alpha1.ConfigEffectReboot, AppliedAt: at}
	set(m, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonInstalled)
	set(m, v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonNotReachable)
	set(m, v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonLeftMaintenance)
	if err := configstatus.WriteStatus(ctx, asController, m); err != nil {
		t.Fatal(err)
	}

	// The operation forgets the config.
	if err := configstatus.ForgetConfig(ctx, asController, get(), "reset-1", at); err != nil {
		t.Fatalf("forget the config: %v", err)
	}
	got := get()
	if got.Status.AppliedConfig != nil {
		t.Errorf("the config is still recorded: %+v", got.Status.AppliedConfig)
	}
	for _, c := range got.Status.Conditions {
		if c.Reason == "" {
			t.Errorf("condition %s lost its reason: %+v", c.Type, c)
		}
	}
	if !itest.HasCondition(got.Status.Conditions, v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonLeftMaintenance) ||
		!itest.HasCondition(got.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonPinnedAfterReset) {
		t.Errorf("intake's conditions: %s", itest.DescribeStatus(got))
	}
	// Intake writes them again on its own, as it does in maintenance mode.
	m = get()
	set(m, v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonContacted)
	if err := intake.WriteStatus(ctx, asController, m); err != nil {
		t.Fatalf("intake writes its conditions after the reset: %v", err)
	}
}
