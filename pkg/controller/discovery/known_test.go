package discovery

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// A node a MachineReclaim resets or takes in is known: between its old
// machine and its new one no TalosMachine has its address, and a scan must
// not adopt it meanwhile.
func TestKnownAddressesIncludeRunningReclaims(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reclaim := func(name, address string, phase v1alpha1.ReclaimPhase) client.Object {
		return &v1alpha1.MachineReclaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
			Status: v1alpha1.MachineReclaimStatus{Phase: phase, Address: address}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "team"}, Spec: v1alpha1.TalosMachineSpec{Address: "10.0.0.1:50000"}},
		reclaim("resetting", "10.0.0.2:50000", v1alpha1.ReclaimResetting),
		reclaim("joining", "[::ffff:10.0.0.3]:50000", v1alpha1.ReclaimJoining),
		reclaim("done", "10.0.0.4:50000", v1alpha1.ReclaimSucceeded),
		reclaim("failed", "10.0.0.5:50000", v1alpha1.ReclaimFailed),
	).Build()
	known, err := (&Reconciler{Client: c}).knownAddresses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for address, want := range map[string]bool{
		"10.0.0.1:50000": true, "10.0.0.2:50000": true, "10.0.0.3:50000": true, "10.0.0.4:50000": false, "10.0.0.5:50000": false,
	} {
		if known[normalize(address)] != want {
			t.Errorf("%s known: %v, want %v", address, known[normalize(address)], want)
		}
	}
}
