package api

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

// TestCredentialRequestNeedsTheDownloadItStandsFor checks, through the real authorizer and the roles in
// artifacts/, that a TalosCredentialRequest is admitted only when its requester holds the download verb
// of its purpose: operators may ask for a reader talosconfig but not an etcd snapshot; admins may.
func TestCredentialRequestNeedsTheDownloadItStandsFor(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	operator := itest.APIClientFor(t, itest.CP.ConfigFor("bob", "ichor:operator")).IchorV1alpha1().TalosCredentialRequests(ns)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosCredentialRequests(ns)

	reader := itest.APITalosCredentialRequest(t, "reader", ns)
	if _, err := operator.Create(ctx, reader, metav1.CreateOptions{}); err != nil {
		t.Fatalf("operator reader talosconfig: %v", err)
	}

	snapshot := itest.APITalosCredentialRequest(t, "snapshot", ns)
	snapshot.Spec.Purpose = v1alpha1.PurposeEtcdSnapshot
	snapshot.Spec.Machines = []string{"m1"}
	_, err := operator.Create(ctx, snapshot, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot request a etcd-snapshot credential: it needs the "download" verb on talosmachines/etcd-snapshot "m1"`) {
		t.Fatalf("operator etcd-snapshot credential: want Forbidden naming the download, got %v", err)
	}
	if _, err := admin.Create(ctx, snapshot, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin etcd-snapshot credential: %v", err)
	}

	// A packet capture's os:operator certificate reboots, shuts down and
	// upgrades every node: the packet-capture download alone does not get it.
	itest.GrantRole(ctx, t, ns, "capturer", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "pat"},
		rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"taloscredentialrequests"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines/packet-capture"}, Verbs: []string{"download"}})
	capture := itest.APITalosCredentialRequest(t, "capture", ns)
	capture.Spec.Purpose = v1alpha1.PurposePacketCapture
	capture.Spec.Machines = []string{"m1"}
	capturer := itest.APIClientFor(t, itest.CP.ConfigFor("pat")).IchorV1alpha1().TalosCredentialRequests(ns)
	var refused error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, refused = capturer.Create(ctx, capture, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		// RBAC sees the binding a moment later; until then the create itself is refused.
		return !apierrors.IsForbidden(refused) || strings.Contains(refused.Error(), "cannot request"), nil
	})
	if !apierrors.IsForbidden(refused) || !strings.Contains(refused.Error(), `needs the "download" verb on talosmachines/etcd-snapshot of every talosmachine`) {
		t.Fatalf("packet-capture credential with only its download: want Forbidden naming the rights of os:operator, got %v", refused)
	}
	if _, err := admin.Create(ctx, capture, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin packet-capture credential: %v", err)
	}

	viewer := itest.APIClientFor(t, itest.CP.ConfigFor("alice", "ichor:viewer")).IchorV1alpha1().TalosCredentialRequests(ns)
	other := itest.APITalosCredentialRequest(t, "viewer", ns)
	if _, err := viewer.Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("viewer credential request: want Forbidden, got %v", err)
	}
}
