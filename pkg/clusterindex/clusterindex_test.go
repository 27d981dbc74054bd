package clusterindex

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func machine(name, cluster string) *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1alpha1.TalosMachineSpec{ClusterName: cluster}}
}

// enqueued runs h on a generic event for o and returns the queued names.
func enqueued(t *testing.T, h handler.EventHandler, o client.Object) []string {
	t.Helper()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h.Generic(context.Background(), event.GenericEvent{Object: o}, q)
	var names []string
	for q.Len() > 0 {
		r, _ := q.Get()
		names = append(names, r.Name)
		q.Done(r)
	}
	slices.Sort(names)
	return names
}

func TestHandlersMapToTheCluster(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&v1alpha1.TalosMachine{}, Field, func(o client.Object) []string { return []string{ClusterOf(o)} }).
		WithObjects(machine("a1", "a"), machine("a2", "a"), machine("b1", "b")).Build()
	cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	patch := &v1alpha1.TalosConfigPatch{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1alpha1.TalosConfigPatchSpec{ClusterName: "b"}}

	if got := enqueued(t, EnqueueMachines(c), cluster); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("a cluster's change enqueues %v, want its machines a1 a2", got)
	}
	if got := enqueued(t, EnqueueMachines(c), patch); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("a patch's change enqueues %v, want b1", got)
	}
	if got := enqueued(t, EnqueueCluster(), machine("a1", "a")); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a machine's change enqueues %v, want its cluster a", got)
	}
	if got := enqueued(t, EnqueueCluster(), machine("loose", "")); len(got) != 0 {
		t.Errorf("a machine of no cluster enqueues %v", got)
	}
}
