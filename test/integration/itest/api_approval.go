package itest

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// PinnedMachine creates a TalosMachine and records, as the controller does after intake, the
// maintenance certificate it pinned.
func PinnedMachine(t *testing.T, ns, name string) *v1alpha1.TalosMachine {
	t.Helper()
	return PinnedMachineOf(t, ns, name, v1alpha1.MachineRoleWorker)
}

// PinnedMachineOf is pinnedMachine with role.
func PinnedMachineOf(t *testing.T, ns, name string, role v1alpha1.MachineRole) *v1alpha1.TalosMachine {
	t.Helper()
	ctx := APIContext(t)
	admin := APIClient(t).IchorV1alpha1().TalosMachines(ns)
	// The cluster exists and is not bootstrapped: an operator approves its workers.
	if _, err := APIClient(t).IchorV1alpha1().TalosClusters(ns).Create(ctx, APITalosCluster("prod", ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create cluster: %v", err)
	}
	m := APITalosMachine(name, ns, "prod")
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

// WithDecision returns a copy of m asking for decision with reason.
func WithDecision(m *v1alpha1.TalosMachine, decision v1alpha1.ApprovalDecision, reason string) *v1alpha1.TalosMachine {
	m = m.DeepCopy()
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: decision, Reason: reason, By: "forged", At: metav1.Unix(1, 0)}
	return m
}

// GrantUpdateOnApproval lets group read TalosMachines and update talosmachines/approval in ns, without
// the approve verb.
func GrantUpdateOnApproval(t *testing.T, ns, group string) {
	t.Helper()
	ctx := APIContext(t)
	kube, err := kubernetes.NewForConfig(CP.AdminConfig)
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
