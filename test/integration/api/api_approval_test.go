package api

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestApprovalNeedsTheApproveVerb(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	m := itest.PinnedMachine(t, ns, "m1")

	viewer := itest.APIClientFor(t, itest.CP.ConfigFor("alice", "ichor:viewer")).IchorV1alpha1().TalosMachines(ns)
	_, err := viewer.UpdateApproval(ctx, m.Name, itest.WithDecision(m, v1alpha1.ApprovalApproved, ""), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("viewer approval: want Forbidden, got %v", err)
	}

	// Update on the subresource alone is not enough: the approve verb is checked too.
	itest.GrantUpdateOnApproval(t, ns, "ichor:approval-updater")
	updater := itest.APIClientFor(t, itest.CP.ConfigFor("dave", "ichor:approval-updater")).IchorV1alpha1().TalosMachines(ns)
	// RBAC reaches the authorizers through informers: wait until the grant is visible.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := updater.Get(ctx, m.Name, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the grant never took effect: %v", err)
	}
	_, err = updater.UpdateApproval(ctx, m.Name, itest.WithDecision(m, v1alpha1.ApprovalApproved, ""), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "approve" verb on resource "talosmachines", subresource "approval"`) {
		t.Fatalf("update without approve: want Forbidden naming the verb, got %v", err)
	}

	if got, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, m.Name, metav1.GetOptions{}); err != nil || got.Status.Approval != nil {
		t.Fatalf("a refused approval left %+v (%v)", got.Status.Approval, err)
	}

	operator := itest.APIClientFor(t, itest.CP.ConfigFor("bob", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)
	changed := itest.WithDecision(m, v1alpha1.ApprovalApproved, "racked in row 4")
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
	again, err := operator.UpdateApproval(ctx, m.Name, itest.WithDecision(got, v1alpha1.ApprovalApproved, "again"), metav1.UpdateOptions{})
	if err != nil || again.Status.Approval.Reason != "racked in row 4" || !again.Status.Approval.At.Equal(&a.At) {
		t.Fatalf("repeated approval: %+v, %v", again.Status.Approval, err)
	}
	_, err = operator.UpdateApproval(ctx, m.Name, itest.WithDecision(again, v1alpha1.ApprovalRejected, "changed my mind"), metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already approved by bob") {
		t.Fatalf("reversing a decision: want Invalid naming the first decision, got %v", err)
	}

	// Status writes (the controller's) keep the decision, whatever they send.
	status := again.DeepCopy()
	status.Status.Approval = nil
	status.Status.Phase = v1alpha1.MachinePhaseConfiguring
	afterStatus, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).UpdateStatus(ctx, status, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status update: %v", err)
	}
	if afterStatus.Status.Approval == nil || afterStatus.Status.Approval.By != "bob" || afterStatus.Status.Phase != v1alpha1.MachinePhaseConfiguring {
		t.Fatalf("status write changed the approval: %+v", afterStatus.Status)
	}
}

func TestApprovalRefusals(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	operator := itest.APIClientFor(t, itest.CP.ConfigFor("bob", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)

	// Nothing pinned yet: nothing to approve.
	unpinned, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).Create(ctx, itest.APITalosMachine("fresh", ns, "prod"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = operator.UpdateApproval(ctx, unpinned.Name, itest.WithDecision(unpinned, v1alpha1.ApprovalRejected, "unknown box"), metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "not pinned yet") {
		t.Fatalf("approval before pinning: want Invalid, got %v", err)
	}

	m := itest.PinnedMachine(t, ns, "m2")
	for _, tc := range []struct {
		name   string
		obj    *v1alpha1.TalosMachine
		fields []string
	}{
		{"no decision", m, []string{"status.approval"}},
		{"unknown decision", itest.WithDecision(m, "Maybe", ""), []string{"status.approval.decision"}},
		{"rejection without a reason", itest.WithDecision(m, v1alpha1.ApprovalRejected, " "), []string{"status.approval.reason"}},
		{"reason too long", itest.WithDecision(m, v1alpha1.ApprovalApproved, strings.Repeat("x", 1025)), []string{"status.approval.reason"}},
	} {
		_, err := operator.UpdateApproval(ctx, m.Name, tc.obj, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", tc.name, err)
			continue
		}
		if got := itest.APICauseFields(t, err); strings.Join(got, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("%s: causes %v, want %v", tc.name, got, tc.fields)
		}
	}

	// Dry run: validated and authorized, nothing stored.
	if _, err := operator.UpdateApproval(ctx, m.Name, itest.WithDecision(m, v1alpha1.ApprovalRejected, "dry"), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run rejection: %v", err)
	}
	got, err := operator.Get(ctx, m.Name, metav1.GetOptions{})
	if err != nil || got.Status.Approval != nil {
		t.Fatalf("dry run stored %+v (%v)", got.Status.Approval, err)
	}

	// A rejection is recorded with its reason.
	got, err = operator.UpdateApproval(ctx, m.Name, itest.WithDecision(m, v1alpha1.ApprovalRejected, "not ours"), metav1.UpdateOptions{})
	if err != nil || got.Status.Approval.Decision != v1alpha1.ApprovalRejected || got.Status.Approval.Reason != "not ours" {
		t.Fatalf("rejection: %+v, %v", got.Status.Approval, err)
	}
}
