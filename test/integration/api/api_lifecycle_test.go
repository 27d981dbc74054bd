package api

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestAPIDryRun(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	ichor := itest.APIClient(t).IchorV1alpha1()
	machines := ichor.TalosMachines(ns)

	// Create: the answer is what would be stored; nothing is.
	dry, err := machines.Create(ctx, itest.APITalosMachine("dry", ns, "alpha"), metav1.CreateOptions{DryRun: itest.APIDryRun})
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if dry.Name != "dry" || dry.Generation != 1 || dry.Spec.Role != v1alpha1.MachineRoleWorker {
		t.Errorf("dry-run create answered name %q generation %d role %q, want dry 1 worker", dry.Name, dry.Generation, dry.Spec.Role)
	}
	if _, err := machines.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after dry-run create: want NotFound, got %v", err)
	}
	// A dry-run create still runs the server's create logic.
	op, err := ichor.TalosOperations(ns).Create(ctx, itest.APITalosOperation("dry-op", ns, v1alpha1.OperationReboot), metav1.CreateOptions{DryRun: itest.APIDryRun})
	if err != nil {
		t.Fatalf("dry-run create operation: %v", err)
	}
	if op.Status.Phase != v1alpha1.OperationPending {
		t.Errorf("dry-run operation phase = %q, want Pending", op.Status.Phase)
	}
	if list, err := ichor.TalosOperations(ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("operations after dry-run create: %v (err %v), want none", itest.APINames(t, list), err)
	}

	original, err := machines.Create(ctx, itest.APITalosMachine("real", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assertUnchanged := func(what string) {
		t.Helper()
		got, err := machines.Get(ctx, "real", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get after dry-run %s: %v", what, err)
		}
		if got.ResourceVersion != original.ResourceVersion || got.Spec.Hostname != "" || got.Status.Phase != "" ||
			got.Generation != 1 || got.DeletionTimestamp != nil {
			t.Errorf("after dry-run %s: rv %s hostname %q phase %q generation %d deletionTimestamp %v; want rv %s and the original",
				what, got.ResourceVersion, got.Spec.Hostname, got.Status.Phase, got.Generation, got.DeletionTimestamp, original.ResourceVersion)
		}
	}

	changed := original.DeepCopy()
	changed.Spec.Hostname = "dry-host"
	answer, err := machines.Update(ctx, changed, metav1.UpdateOptions{DryRun: itest.APIDryRun})
	if err != nil {
		t.Fatalf("dry-run update: %v", err)
	}
	if answer.Spec.Hostname != "dry-host" || answer.Generation != 2 {
		t.Errorf("dry-run update answered hostname %q generation %d, want dry-host 2", answer.Spec.Hostname, answer.Generation)
	}
	assertUnchanged("update")

	statused := original.DeepCopy()
	statused.Status.Phase = v1alpha1.MachinePhaseReady
	answer, err = machines.UpdateStatus(ctx, statused, metav1.UpdateOptions{DryRun: itest.APIDryRun})
	if err != nil {
		t.Fatalf("dry-run status update: %v", err)
	}
	if answer.Status.Phase != v1alpha1.MachinePhaseReady {
		t.Errorf("dry-run status update answered phase %q, want Ready", answer.Status.Phase)
	}
	assertUnchanged("status update")

	if err := machines.Delete(ctx, "real", metav1.DeleteOptions{DryRun: itest.APIDryRun}); err != nil {
		t.Fatalf("dry-run delete: %v", err)
	}
	assertUnchanged("delete")
}

func TestAPIFinalizers(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	const finalizer = "ichor.dev/api-test-hold"

	obj := itest.APITalosMachine("held", ns, "alpha")
	obj.Finalizers = []string{finalizer}
	created, err := machines.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave nothing that would keep the namespace from going away.
		m, err := machines.Get(context.Background(), "held", metav1.GetOptions{})
		if err == nil && len(m.Finalizers) > 0 {
			m.Finalizers = nil
			_, _ = machines.Update(context.Background(), m, metav1.UpdateOptions{})
		}
	})
	w, err := machines.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	if err := machines.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	held, err := machines.Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after delete of a finalized object: %v", err)
	}
	if held.DeletionTimestamp == nil {
		t.Fatalf("object with a finalizer has no deletionTimestamp after delete")
	}
	if !slices.Equal(held.Finalizers, []string{finalizer}) {
		t.Errorf("finalizers = %v, want [%s]", held.Finalizers, finalizer)
	}
	if typ, m := itest.APINextMachineEvent(t, w); typ != watch.Modified || m.DeletionTimestamp == nil {
		t.Errorf("first event after delete = %s (deletionTimestamp %v), want MODIFIED with a deletionTimestamp", typ, m.DeletionTimestamp)
	}

	// A second delete changes nothing; the object stays.
	if err := machines.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if again, err := machines.Get(ctx, "held", metav1.GetOptions{}); err != nil || !again.DeletionTimestamp.Equal(held.DeletionTimestamp) {
		t.Fatalf("after second delete: %v (err %v), want the object with deletionTimestamp %v", again, err, held.DeletionTimestamp)
	}

	// Removing the finalizer lets the object go.
	held.Finalizers = nil
	if _, err := machines.Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove finalizer: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := machines.Get(ctx, "held", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("object not gone after its finalizer was removed: %v", err)
	}
	for {
		typ, m := itest.APINextMachineEvent(t, w)
		if typ == watch.Deleted {
			if m.Name != "held" {
				t.Errorf("DELETED event for %s, want held", m.Name)
			}
			break
		}
		if typ != watch.Modified {
			t.Fatalf("event %s before DELETED, want only MODIFIED", typ)
		}
	}
}
