package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// pinnedMachine creates a TalosMachine and records, as the controller does after intake, the
// maintenance certificate it pinned.
func pinnedMachine(t *testing.T, ns, name string) *v1alpha1.TalosMachine {
	t.Helper()
	return pinnedMachineOf(t, ns, name, v1alpha1.MachineRoleWorker)
}

// pinnedMachineOf is pinnedMachine with role.
func pinnedMachineOf(t *testing.T, ns, name string, role v1alpha1.MachineRole) *v1alpha1.TalosMachine {
	t.Helper()
	ctx := apiContext(t)
	admin := apiClient(t).IchorV1alpha1().TalosMachines(ns)
	// The cluster exists and is not bootstrapped: an operator approves its workers.
	if _, err := apiClient(t).IchorV1alpha1().TalosClusters(ns).Create(ctx, apiTalosCluster("prod", ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create cluster: %v", err)
	}
	m := apiTalosMachine(name, ns, "prod")
	m.Spec.Role = role
	m, err := admin.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	m.Status.Phase = v1alpha1.MachinePhasePendingApproval
	m.Status.Maintenance = &v1alpha1.MaintenanceStatus{
		CertificateFingerprint: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
		SeenAt:                 metav1.Now(),
	}
	if m, err = admin.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	return m
}

// withDecision returns a copy of m asking for decision with reason.
func withDecision(m *v1alpha1.TalosMachine, decision v1alpha1.ApprovalDecision, reason string) *v1alpha1.TalosMachine {
	m = m.DeepCopy()
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: decision, Reason: reason, By: "forged", At: metav1.Unix(1, 0)}
	return m
}

func TestApprovalNeedsTheApproveVerb(t *testing.T) {
	ns := cp.Namespace(t)
	ctx := apiContext(t)
	m := pinnedMachine(t, ns, "m1")

	viewer := apiClientFor(t, cp.ConfigFor("alice", "ichor:viewer")).IchorV1alpha1().TalosMachines(ns)
	_, err := viewer.UpdateApproval(ctx, m.Name, withDecision(m, v1alpha1.ApprovalApproved, ""), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("viewer approval: want Forbidden, got %v", err)
	}

	// Update on the subresource alone is not enough: the approve verb is checked too.
	grantUpdateOnApproval(t, ns, "ichor:approval-updater")
	updater := apiClientFor(t, cp.ConfigFor("dave", "ichor:approval-updater")).IchorV1alpha1().TalosMachines(ns)
	// RBAC reaches the authorizers through informers: wait until the grant is visible.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := updater.Get(ctx, m.Name, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the grant never took effect: %v", err)
	}
	_, err = updater.UpdateApproval(ctx, m.Name, withDecision(m, v1alpha1.ApprovalApproved, ""), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "approve" verb on resource "talosmachines", subresource "approval"`) {
		t.Fatalf("update without approve: want Forbidden naming the verb, got %v", err)
	}

	if got, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, m.Name, metav1.GetOptions{}); err != nil || got.Status.Approval != nil {
		t.Fatalf("a refused approval left %+v (%v)", got.Status.Approval, err)
	}

	operator := apiClientFor(t, cp.ConfigFor("bob", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)
	changed := withDecision(m, v1alpha1.ApprovalApproved, "racked in row 4")
	changed.Spec.Address = "10.9.9.9:50000"
	changed.Labels = map[string]string{"sneaky": "true"}
	got, err := operator.UpdateApproval(ctx, m.Name, changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("operator approval: %v", err)
	}
	a := got.Status.Approval
	if a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != "bob" || a.Reason != "racked in row 4" || a.At.Unix() <= 1 {
		t.Fatalf("approval = %+v, want Approved by bob now with the reason", a)
	}
	if got.Spec.Address != m.Spec.Address || got.Labels["sneaky"] != "" || got.Generation != m.Generation {
		t.Fatalf("approval changed more than status.approval: spec %+v labels %v generation %d", got.Spec, got.Labels, got.Generation)
	}

	// The same decision again changes nothing; the opposite one is refused.
	again, err := operator.UpdateApproval(ctx, m.Name, withDecision(got, v1alpha1.ApprovalApproved, "again"), metav1.UpdateOptions{})
	if err != nil || again.Status.Approval.Reason != "racked in row 4" || !again.Status.Approval.At.Equal(&a.At) {
		t.Fatalf("repeated approval: %+v, %v", again.Status.Approval, err)
	}
	_, err = operator.UpdateApproval(ctx, m.Name, withDecision(again, v1alpha1.ApprovalRejected, "changed my mind"), metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already approved by bob") {
		t.Fatalf("reversing a decision: want Invalid naming the first decision, got %v", err)
	}

	// Status writes (the controller's) keep the decision, whatever they send.
	status := again.DeepCopy()
	status.Status.Approval = nil
	status.Status.Phase = v1alpha1.MachinePhaseConfiguring
	afterStatus, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).UpdateStatus(ctx, status, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status update: %v", err)
	}
	if afterStatus.Status.Approval == nil || afterStatus.Status.Approval.By != "bob" || afterStatus.Status.Phase != v1alpha1.MachinePhaseConfiguring {
		t.Fatalf("status write changed the approval: %+v", afterStatus.Status)
	}
}

func TestApprovalRefusals(t *testing.T) {
	ns := cp.Namespace(t)
	ctx := apiContext(t)
	operator := apiClientFor(t, cp.ConfigFor("bob", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)

	// Nothing pinned yet: nothing to approve.
	unpinned, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).Create(ctx, apiTalosMachine("fresh", ns, "prod"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = operator.UpdateApproval(ctx, unpinned.Name, withDecision(unpinned, v1alpha1.ApprovalRejected, "unknown box"), metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "not pinned yet") {
		t.Fatalf("approval before pinning: want Invalid, got %v", err)
	}

	m := pinnedMachine(t, ns, "m2")
	for _, tc := range []struct {
		name   string
		obj    *v1alpha1.TalosMachine
		fields []string
	}{
		{"no decision", m, []string{"status.approval"}},
		{"unknown decision", withDecision(m, "Maybe", ""), []string{"status.approval.decision"}},
		{"rejection without a reason", withDecision(m, v1alpha1.ApprovalRejected, " "), []string{"status.approval.reason"}},
		{"reason too long", withDecision(m, v1alpha1.ApprovalApproved, strings.Repeat("x", 1025)), []string{"status.approval.reason"}},
	} {
		_, err := operator.UpdateApproval(ctx, m.Name, tc.obj, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", tc.name, err)
			continue
		}
		if got := apiCauseFields(t, err); strings.Join(got, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("%s: causes %v, want %v", tc.name, got, tc.fields)
		}
	}

	// Dry run: validated and authorized, nothing stored.
	if _, err := operator.UpdateApproval(ctx, m.Name, withDecision(m, v1alpha1.ApprovalRejected, "dry"), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run rejection: %v", err)
	}
	got, err := operator.Get(ctx, m.Name, metav1.GetOptions{})
	if err != nil || got.Status.Approval != nil {
		t.Fatalf("dry run stored %+v (%v)", got.Status.Approval, err)
	}

	// A rejection is recorded with its reason.
	got, err = operator.UpdateApproval(ctx, m.Name, withDecision(m, v1alpha1.ApprovalRejected, "not ours"), metav1.UpdateOptions{})
	if err != nil || got.Status.Approval.Decision != v1alpha1.ApprovalRejected || got.Status.Approval.Reason != "not ours" {
		t.Fatalf("rejection: %+v, %v", got.Status.Approval, err)
	}
}

// grantUpdateOnApproval lets group read TalosMachines and update talosmachines/approval in ns, without
// the approve verb.
func grantUpdateOnApproval(t *testing.T, ns, group string) {
	t.Helper()
	ctx := apiContext(t)
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "approval-updater", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines", "talosmachines/approval"}, Verbs: []string{"get", "update"},
		}},
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "approval-updater", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
