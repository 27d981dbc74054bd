package api

import (
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	applyv1alpha1 "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestAPIServerSideApply(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	const name = "applied"

	// Manager a creates the machine; the status it sends to the main endpoint is dropped.
	m, err := machines.Apply(ctx, applyv1alpha1.TalosMachine(name, ns).
		WithLabels(map[string]string{"owner": "a"}).
		WithSpec(applyv1alpha1.TalosMachineSpec().WithAddress("10.5.0.20:50000").WithHostname("node-a")).
		WithStatus(applyv1alpha1.TalosMachineStatus().WithPhase(v1alpha1.MachinePhaseReady)),
		metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatalf("apply by a: %v", err)
	}
	if m.Spec.Hostname != "node-a" || m.Spec.Address != "10.5.0.20:50000" || m.Generation != 1 {
		t.Errorf("after apply by a: hostname %q address %q generation %d, want node-a 10.5.0.20:50000 1", m.Spec.Hostname, m.Spec.Address, m.Generation)
	}
	if m.Status.Phase != "" {
		t.Errorf("status.phase = %q after applying it to the main endpoint, want it ignored", m.Status.Phase)
	}
	a := itest.APIManagedFields(t, m, "a", metav1.ManagedFieldsOperationApply, "")
	if a == nil {
		t.Fatalf("managedFields lack an Apply entry for a: %+v", m.ManagedFields)
	}
	for _, path := range [][]string{{"f:spec", "f:hostname"}, {"f:spec", "f:address"}, {"f:metadata", "f:labels", "f:owner"}} {
		if !itest.APIOwns(a, path...) {
			t.Errorf("a does not own %v: %v", path, a)
		}
	}
	if itest.APIOwns(a, "f:status") {
		t.Errorf("a owns status through the main endpoint: %v", a)
	}

	// Manager b applies another hostname: a conflict naming a and the field.
	bConfig := applyv1alpha1.TalosMachine(name, ns).
		WithSpec(applyv1alpha1.TalosMachineSpec().WithAddress("10.5.0.20:50000").WithHostname("node-b"))
	_, err = machines.Apply(ctx, bConfig, metav1.ApplyOptions{FieldManager: "b"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("conflicting apply by b: want 409 Conflict, got %v", err)
	}
	status := itest.APIStatus(t, err)
	var conflicts []string
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			if c.Type == metav1.CauseTypeFieldManagerConflict {
				conflicts = append(conflicts, c.Field)
				if !strings.Contains(c.Message, `"a"`) {
					t.Errorf("conflict cause %q does not name manager a", c.Message)
				}
			}
		}
	}
	if !slices.Equal(conflicts, []string{".spec.hostname"}) {
		t.Errorf("conflicting fields = %v, want [.spec.hostname] (address has the same value, no conflict)", conflicts)
	}
	if got, err := machines.Get(ctx, name, metav1.GetOptions{}); err != nil || got.Spec.Hostname != "node-a" {
		t.Fatalf("after refused apply: hostname %v (err %v), want node-a", got, err)
	}

	// With Force, b takes the field over.
	m, err = machines.Apply(ctx, bConfig, metav1.ApplyOptions{FieldManager: "b", Force: true})
	if err != nil {
		t.Fatalf("forced apply by b: %v", err)
	}
	if m.Spec.Hostname != "node-b" || m.Generation != 2 {
		t.Errorf("after forced apply: hostname %q generation %d, want node-b 2", m.Spec.Hostname, m.Generation)
	}
	a = itest.APIManagedFields(t, m, "a", metav1.ManagedFieldsOperationApply, "")
	b := itest.APIManagedFields(t, m, "b", metav1.ManagedFieldsOperationApply, "")
	if itest.APIOwns(a, "f:spec", "f:hostname") || !itest.APIOwns(b, "f:spec", "f:hostname") {
		t.Errorf("hostname owners after force: a %v, b %v; want b only", itest.APIOwns(a, "f:spec", "f:hostname"), itest.APIOwns(b, "f:spec", "f:hostname"))
	}
	if !itest.APIOwns(a, "f:spec", "f:address") || !itest.APIOwns(b, "f:spec", "f:address") {
		t.Errorf("address should be shared by a and b: a %v b %v", a, b)
	}

	// Manager c applies status through /status; the spec and label it sends are ignored.
	rv := m.ResourceVersion
	m, err = machines.ApplyStatus(ctx, applyv1alpha1.TalosMachine(name, ns).
		WithLabels(map[string]string{"owner": "c"}).
		WithSpec(applyv1alpha1.TalosMachineSpec().WithHostname("node-c")).
		WithStatus(applyv1alpha1.TalosMachineStatus().WithPhase(v1alpha1.MachinePhaseReady).WithTalosVersion("v1.13.0")),
		metav1.ApplyOptions{FieldManager: "c"})
	if err != nil {
		t.Fatalf("apply status by c: %v", err)
	}
	if m.Status.Phase != v1alpha1.MachinePhaseReady || m.Status.TalosVersion != "v1.13.0" {
		t.Errorf("status after ApplyStatus: phase %q talosVersion %q, want Ready v1.13.0", m.Status.Phase, m.Status.TalosVersion)
	}
	if m.Spec.Hostname != "node-b" || m.Labels["owner"] != "a" || m.Generation != 2 {
		t.Errorf("after ApplyStatus: hostname %q label %q generation %d, want node-b a 2", m.Spec.Hostname, m.Labels["owner"], m.Generation)
	}
	if m.ResourceVersion == rv {
		t.Errorf("ApplyStatus did not write: resourceVersion still %s", rv)
	}
	c := itest.APIManagedFields(t, m, "c", metav1.ManagedFieldsOperationApply, "status")
	if c == nil {
		t.Fatalf("managedFields lack an Apply entry for c on status: %+v", m.ManagedFields)
	}
	if keys := itest.APITopLevelKeys(c); !slices.Equal(keys, []string{"f:status"}) {
		t.Errorf("c owns %v, want only f:status: %v", keys, c)
	}
	if !itest.APIOwns(c, "f:status", "f:phase") || !itest.APIOwns(c, "f:status", "f:talosVersion") {
		t.Errorf("c does not own the status fields it applied: %v", c)
	}
	// a and b keep their spec fields.
	if b := itest.APIManagedFields(t, m, "b", metav1.ManagedFieldsOperationApply, ""); !itest.APIOwns(b, "f:spec", "f:hostname") {
		t.Errorf("b lost spec.hostname to a status apply: %v", b)
	}

	// A later main-endpoint apply by b leaves the status c wrote alone.
	m, err = machines.Apply(ctx, applyv1alpha1.TalosMachine(name, ns).
		WithSpec(applyv1alpha1.TalosMachineSpec().WithAddress("10.5.0.20:50000").WithHostname("node-b2")),
		metav1.ApplyOptions{FieldManager: "b"})
	if err != nil {
		t.Fatalf("second apply by b: %v", err)
	}
	if m.Spec.Hostname != "node-b2" || m.Status.Phase != v1alpha1.MachinePhaseReady || m.Generation != 3 {
		t.Errorf("after b's second apply: hostname %q phase %q generation %d, want node-b2 Ready 3", m.Spec.Hostname, m.Status.Phase, m.Generation)
	}
}
