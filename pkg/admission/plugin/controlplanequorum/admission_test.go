package controlplanequorum

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

const ns = "team"

func machine(name string, role v1alpha1.MachineRole, phase v1alpha1.MachinePhase) *v1alpha1.TalosMachine {
	m := &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: role},
	}
	m.Status.Phase = phase
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "h"}
	return m
}

// victim is the internal form of a configured, approved control plane about to be deleted.
func victim(name string) *ichor.TalosMachine {
	m := &ichor.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       ichor.TalosMachineSpec{ClusterName: "demo", Role: ichor.MachineRoleControlPlane},
	}
	m.Status.Approval = &ichor.ApprovalStatus{Decision: ichor.ApprovalApproved}
	m.Status.AppliedConfig = &ichor.AppliedConfigStatus{Hash: "h"}
	return m
}

func plugin(t *testing.T, cluster *v1alpha1.TalosCluster, machines ...*v1alpha1.TalosMachine) *Plugin {
	t.Helper()
	var objs []runtime.Object
	for _, m := range machines {
		objs = append(objs, m)
	}
	if cluster != nil {
		objs = append(objs, cluster)
	}
	p := New()
	p.SetIchorClient(fake.NewClientset(objs...))
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func deleteOf(m *ichor.TalosMachine) admission.Attributes {
	return admission.NewAttributesRecord(nil, m, ichor.Kind("TalosMachine").WithVersion(""), ns, m.Name,
		ichor.Resource("talosmachines").WithVersion("v1alpha1"), "", admission.Delete, &metav1.DeleteOptions{}, false, nil)
}

func TestQuorum(t *testing.T) {
	demo := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns}}
	cp, worker := v1alpha1.MachineRoleControlPlane, v1alpha1.MachineRoleWorker
	ready, down := v1alpha1.MachinePhaseReady, v1alpha1.MachinePhaseUnreachable
	for _, c := range []struct {
		name    string
		cluster *v1alpha1.TalosCluster
		others  []*v1alpha1.TalosMachine
		refused string
	}{
		{"two healthy of two left", demo, []*v1alpha1.TalosMachine{machine("cp-2", cp, ready), machine("cp-3", cp, ready)}, ""},
		{"one healthy of two left", demo, []*v1alpha1.TalosMachine{machine("cp-2", cp, ready), machine("cp-3", cp, down)},
			"would leave TalosCluster demo with 1 healthy of 2 etcd members, and quorum needs 2; wait until these are Ready: cp-3 (Unreachable)"},
		{"three healthy of four left", demo, []*v1alpha1.TalosMachine{machine("cp-2", cp, ready), machine("cp-3", cp, ready),
			machine("cp-4", cp, ready), machine("cp-5", cp, down)}, ""},
		{"the last control plane", demo, []*v1alpha1.TalosMachine{machine("w-1", worker, ready)},
			"cp-1 is the last control plane of TalosCluster demo"},
		{"the last control plane of a cluster that is gone", nil, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := plugin(t, c.cluster, c.others...).Validate(context.Background(), deleteOf(victim("cp-1")), nil)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.refused != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("got %v, want Forbidden with %q", err, c.refused)
			}
		})
	}
}

func TestOnlyConfiguredControlPlanesAreChecked(t *testing.T) {
	p := plugin(t, &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns}})
	unconfigured := victim("cp-1")
	unconfigured.Status.AppliedConfig = nil
	worker := victim("w-1")
	worker.Spec.Role = ichor.MachineRoleWorker
	rejected := victim("cp-9")
	rejected.Status.Approval.Decision = ichor.ApprovalRejected
	for _, m := range []*ichor.TalosMachine{unconfigured, worker, rejected} {
		if err := p.Validate(context.Background(), deleteOf(m), nil); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
}

// TestOverride lets one delete through when an admin granted an override of
// the quorum check on the machine, with an audit annotation naming the admin;
// an override of another check does nothing.
func TestOverride(t *testing.T) {
	demo := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns}}
	others := []*v1alpha1.TalosMachine{
		machine("cp-2", v1alpha1.MachineRoleControlPlane, v1alpha1.MachinePhaseReady),
		machine("cp-3", v1alpha1.MachineRoleControlPlane, v1alpha1.MachinePhaseUnreachable),
	}
	p := plugin(t, demo, others...)

	refused := victim("cp-1")
	err := p.Validate(context.Background(), deleteOf(refused), nil)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "an admin may let this delete through with the override subresource (check ControlPlaneQuorum)") {
		t.Fatalf("without an override: %v", err)
	}

	wrongCheck := victim("cp-1")
	wrongCheck.Status.Override = &ichor.OverrideStatus{Check: ichor.CheckPatchSecrets, By: "carol", Reason: "x"}
	if err := p.Validate(context.Background(), deleteOf(wrongCheck), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("an override of another check let the delete through: %v", err)
	}

	granted := victim("cp-1")
	granted.Status.Override = &ichor.OverrideStatus{Check: ichor.CheckControlPlaneQuorum, By: "carol", Reason: "cp-3 is gone for good"}
	attrs := &annotated{Attributes: deleteOf(granted), annotations: map[string]string{}}
	if err := p.Validate(context.Background(), attrs, nil); err != nil {
		t.Fatalf("with an override: %v", err)
	}
	if got := attrs.annotations[ichor.AuditAnnotationOverride]; got != "ControlPlaneQuorum by carol: cp-3 is gone for good" {
		t.Errorf("audit annotation %q", got)
	}
}

// annotated records the audit annotations a plugin adds.
type annotated struct {
	admission.Attributes
	annotations map[string]string
}

func (a *annotated) AddAnnotation(key, value string) error {
	a.annotations[key] = value
	return nil
}
