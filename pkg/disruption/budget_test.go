package disruption

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func newBudget(t *testing.T, objs ...client.Object) (*Budget, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}).Build()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	return &Budget{Client: c, Reader: c, Now: func() time.Time { return now }}, c
}

func machine(name string) *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo"},
	}
}

func holder(t *testing.T, c client.Client) *v1alpha1.DisruptionStatus {
	t.Helper()
	var cl v1alpha1.TalosCluster
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "demo"}, &cl); err != nil {
		t.Fatal(err)
	}
	return cl.Status.Disruption
}

func TestBudgetIsHeldByOneMachineAtATime(t *testing.T) {
	ctx := t.Context()
	a, b := machine("a"), machine("b")
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	budget, c := newBudget(t, cluster, a, b)

	if h, err := budget.Acquire(ctx, a, v1alpha1.DisruptionReboot); h != nil || err != nil {
		t.Fatalf("a takes a free budget: holder %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "a" || h.MachineUID != a.UID || h.Action != v1alpha1.DisruptionReboot || h.Since.IsZero() {
		t.Fatalf("recorded holder %+v", h)
	}
	if h, err := budget.Acquire(ctx, b, v1alpha1.DisruptionReset); err != nil || h == nil || h.Machine != "a" {
		t.Fatalf("b while a holds it: holder %+v, %v", h, err)
	}
	// Taking it again (after a restart) keeps it; a new action is recorded.
	if h, err := budget.Acquire(ctx, a, v1alpha1.DisruptionReboot); h != nil || err != nil {
		t.Fatalf("a again: %+v, %v", h, err)
	}
	if h, err := budget.Acquire(ctx, a, v1alpha1.DisruptionReset); h != nil || err != nil || holder(t, c).Action != v1alpha1.DisruptionReset {
		t.Fatalf("a for a reset: %+v, %v, %+v", h, err, holder(t, c))
	}
	// Only the holder gives it back.
	if err := budget.Release(ctx, b); err != nil || holder(t, c) == nil {
		t.Fatalf("b's release: %v, holder %+v", err, holder(t, c))
	}
	if err := budget.Release(ctx, a); err != nil || holder(t, c) != nil {
		t.Fatalf("a's release: %v, holder %+v", err, holder(t, c))
	}
	if h, err := budget.Acquire(ctx, b, v1alpha1.DisruptionReset); h != nil || err != nil {
		t.Fatalf("b once a gave it back: %+v, %v", h, err)
	}
}

func TestBudgetOfAGoneMachineIsFree(t *testing.T) {
	ctx := t.Context()
	a, b := machine("a"), machine("b")
	for _, tc := range []struct {
		name    string
		present []client.Object
	}{
		{"deleted", nil},
		{"replaced by a machine of the same name", []client.Object{&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "another"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := &v1alpha1.TalosCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
				Status: v1alpha1.TalosClusterStatus{Disruption: &v1alpha1.DisruptionStatus{
					Machine: a.Name, MachineUID: a.UID, Action: v1alpha1.DisruptionReset, Since: metav1.Now(),
				}},
			}
			budget, c := newBudget(t, append(tc.present, cluster, b)...)
			if h, err := budget.Acquire(ctx, b, v1alpha1.DisruptionReboot); h != nil || err != nil {
				t.Fatalf("b: holder %+v, %v", h, err)
			}
			if h := holder(t, c); h == nil || h.Machine != "b" {
				t.Errorf("holder %+v", h)
			}
		})
	}
}

// TestBudgetRace: machines racing for a free budget, each through its own
// read and conditional write; exactly one gets it.
func TestBudgetRace(t *testing.T) {
	ctx := t.Context()
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	objs := []client.Object{cluster}
	var ms []*v1alpha1.TalosMachine
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		m := machine(n)
		ms = append(ms, m)
		objs = append(objs, m)
	}
	budget, c := newBudget(t, objs...)
	var wg sync.WaitGroup
	won := make(chan string, len(ms))
	for _, m := range ms {
		wg.Go(func() {
			h, err := budget.Acquire(ctx, m, v1alpha1.DisruptionReboot)
			if err != nil {
				t.Error(err)
			}
			if h == nil && err == nil {
				won <- m.Name
			}
		})
	}
	wg.Wait()
	close(won)
	var winners []string
	for w := range won {
		winners = append(winners, w)
	}
	if len(winners) != 1 || holder(t, c).Machine != winners[0] {
		t.Errorf("winners %v, holder %+v", winners, holder(t, c))
	}
}

// TestOperationHoldIsNotTheMachines: a machine's own rollout neither uses
// nor gives back the budget an operation's step holds for it, and a budget
// whose operation is gone is free.
func TestOperationHoldIsNotTheMachines(t *testing.T) {
	ctx := t.Context()
	a := machine("a")
	op := &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-all", Namespace: "ns"}}
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	budget, c := newBudget(t, cluster, a, op)

	if h, err := budget.AcquireForOperation(ctx, op.Name, a, v1alpha1.DisruptionReboot, 1); h != nil || err != nil {
		t.Fatalf("the operation takes a free budget for a: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Operation != op.Name || h.Machine != "a" {
		t.Fatalf("recorded holder %+v", h)
	}
	if h, err := budget.Acquire(ctx, a, v1alpha1.DisruptionReboot); err != nil || h == nil || h.Operation != op.Name {
		t.Fatalf("a's own rollout while the operation holds it for a: holder %+v, %v", h, err)
	}
	if err := budget.Release(ctx, a); err != nil || holder(t, c) == nil {
		t.Fatalf("a's own release freed the operation's hold: %v, %+v", err, holder(t, c))
	}
	if h, err := budget.AcquireForOperation(ctx, "other", a, v1alpha1.DisruptionReboot, 1); err != nil || h == nil {
		t.Fatalf("another operation while one holds it: holder %+v, %v", h, err)
	}
	if err := budget.ReleaseForOperation(ctx, op.Name, a); err != nil || holder(t, c) != nil {
		t.Fatalf("the operation's release: %v, %+v", err, holder(t, c))
	}

	if h, err := budget.AcquireForOperation(ctx, op.Name, a, v1alpha1.DisruptionReboot, 1); h != nil || err != nil {
		t.Fatalf("again: %+v, %v", h, err)
	}
	if err := c.Delete(ctx, op); err != nil {
		t.Fatal(err)
	}
	if h, err := budget.Acquire(ctx, a, v1alpha1.DisruptionReset); h != nil || err != nil {
		t.Fatalf("a once the holding operation is gone: %+v, %v", h, err)
	}
}

// TestOperationBatch: an operation takes up to its batch of machines away
// with one action; a machine of another batch size, action or holder
// waits; each gives its place back, the first one's going to the next, and
// the budget is free once the last is back.
func TestOperationBatch(t *testing.T) {
	ctx := t.Context()
	a, b, c3 := machine("a"), machine("b"), machine("c")
	op := &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-all", Namespace: "ns"}}
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	budget, c := newBudget(t, cluster, a, b, c3, op)

	for _, m := range []*v1alpha1.TalosMachine{a, b} {
		if h, err := budget.AcquireForOperation(ctx, op.Name, m, v1alpha1.DisruptionReboot, 2); h != nil || err != nil {
			t.Fatalf("%s joins the batch: %+v, %v", m.Name, h, err)
		}
	}
	if h := holder(t, c); h.Machine != "a" || len(h.Batch) != 1 || h.Batch[0].Machine != "b" {
		t.Fatalf("recorded %+v", h)
	}
	// The batch is full; another action, or another operation, waits too.
	if h, err := budget.AcquireForOperation(ctx, op.Name, c3, v1alpha1.DisruptionReboot, 2); err != nil || h == nil {
		t.Fatalf("a third into a batch of 2: %+v, %v", h, err)
	}
	if h, err := budget.Acquire(ctx, c3, v1alpha1.DisruptionReboot); err != nil || h == nil {
		t.Fatalf("c's own rollout during the batch: %+v, %v", h, err)
	}
	// Holding, again: nothing changes.
	if h, err := budget.AcquireForOperation(ctx, op.Name, b, v1alpha1.DisruptionReboot, 2); h != nil || err != nil {
		t.Fatalf("b again: %+v, %v", h, err)
	}
	// a is back: b holds the budget alone, and c may join.
	if err := budget.ReleaseForOperation(ctx, op.Name, a); err != nil {
		t.Fatal(err)
	}
	if h := holder(t, c); h == nil || h.Machine != "b" || len(h.Batch) != 0 {
		t.Fatalf("after a's release: %+v", h)
	}
	if h, err := budget.AcquireForOperation(ctx, op.Name, c3, v1alpha1.DisruptionReboot, 2); h != nil || err != nil {
		t.Fatalf("c joins: %+v, %v", h, err)
	}
	for _, m := range []*v1alpha1.TalosMachine{c3, b} {
		if err := budget.ReleaseForOperation(ctx, op.Name, m); err != nil {
			t.Fatal(err)
		}
	}
	if h := holder(t, c); h != nil {
		t.Fatalf("after every release: %+v", h)
	}
}

// TestOperationHandover: a step's acquire gives back, in the same write,
// the places of the machines whose steps just ended, and only theirs: a
// full batch frees one place for the next machine, another operation's
// hold is not touched, and a refused acquire leaves the leaving machines
// their places for the caller to give back.
func TestOperationHandover(t *testing.T) {
	ctx := t.Context()
	a, b, c3, d := machine("a"), machine("b"), machine("c"), machine("d")
	op := &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "upgrade", Namespace: "ns"}}
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	budget, c := newBudget(t, cluster, a, b, c3, d, op)

	// One at a time: a's place goes to b.
	if h, err := budget.AcquireForOperation(ctx, op.Name, a, v1alpha1.DisruptionReboot, 1); h != nil || err != nil {
		t.Fatalf("a: %+v, %v", h, err)
	}
	if h, err := budget.AcquireForOperation(ctx, op.Name, b, v1alpha1.DisruptionReboot, 1); err != nil || h == nil {
		t.Fatalf("b without a leaving: %+v, %v", h, err)
	}
	if h, err := budget.AcquireForOperation(ctx, op.Name, b, v1alpha1.DisruptionReboot, 1, a); h != nil || err != nil {
		t.Fatalf("b as a leaves: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "b" || h.Operation != op.Name || len(h.Batch) != 0 {
		t.Fatalf("after the handover: %+v", h)
	}

	// A batch of two, full: c leaves, d takes its place; b stays.
	if h, err := budget.AcquireForOperation(ctx, op.Name, c3, v1alpha1.DisruptionReboot, 2); h != nil || err != nil {
		t.Fatalf("c joins: %+v, %v", h, err)
	}
	if h, err := budget.AcquireForOperation(ctx, op.Name, d, v1alpha1.DisruptionReboot, 2, c3); h != nil || err != nil {
		t.Fatalf("d as c leaves: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "b" || len(h.Batch) != 1 || h.Batch[0].Machine != "d" {
		t.Fatalf("after c's handover: %+v", h)
	}
	// The first place leaves: the next of the batch takes it.
	if h, err := budget.AcquireForOperation(ctx, op.Name, a, v1alpha1.DisruptionReboot, 2, b); h != nil || err != nil {
		t.Fatalf("a as b leaves: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "d" || len(h.Batch) != 1 || h.Batch[0].Machine != "a" {
		t.Fatalf("after b's handover: %+v", h)
	}
	// Holding already, as its batch-mate leaves: the leaver's place goes.
	if h, err := budget.AcquireForOperation(ctx, op.Name, a, v1alpha1.DisruptionReboot, 2, d); h != nil || err != nil {
		t.Fatalf("a again as d leaves: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "a" || len(h.Batch) != 0 {
		t.Fatalf("after d's handover: %+v", h)
	}

	// Another operation's machines are not this one's to hand over.
	if h, err := budget.AcquireForOperation(ctx, "other", b, v1alpha1.DisruptionReboot, 1, a); err != nil || h == nil || h.Machine != "a" {
		t.Fatalf("another operation handing over a: %+v, %v", h, err)
	}
	if h := holder(t, c); h == nil || h.Machine != "a" || h.Operation != op.Name {
		t.Fatalf("after another operation's try: %+v", h)
	}
	// The last leaves without a next: an ordinary release.
	if err := budget.ReleaseForOperation(ctx, op.Name, a); err != nil || holder(t, c) != nil {
		t.Fatalf("release: %v, %+v", err, holder(t, c))
	}
}
