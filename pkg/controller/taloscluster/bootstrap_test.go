package taloscluster

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// Bootstrap once: against a fake client and fake Talos nodes. The cluster's
// Kubernetes endpoint is a closed loopback port, so its checks fail fast
// and leave the bootstrap decisions to be tested.

const ns = "ns"

type fixture struct {
	t      *testing.T
	client client.Client
	dialer *talostest.Dialer
	r      *Reconciler
}

// newFixture is cluster demo with a generated bundle and three configured
// control planes cp-1..3 whose nodes run, none of them with etcd yet.
func newFixture(t *testing.T, override *v1alpha1.OverrideStatus) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns, Generation: 1},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://127.0.0.1:1"}},
		Status: v1alpha1.TalosClusterStatus{Override: override, Conditions: []metav1.Condition{{
			Type: v1alpha1.ClusterConditionSecretsReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ClusterReasonGenerated,
			LastTransitionTime: metav1.NewTime(now)}}},
	}
	bundle, err := secretsbundle.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(bundle)
	objs := []client.Object{cluster, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: ns},
		Data:       map[string][]byte{secretsbundle.BundleKey: bundle},
	}}
	dialer := &talostest.Dialer{Nodes: map[string]*talostest.Node{}}
	for i, name := range []string{"cp-1", "cp-2", "cp-3"} {
		address := "10.5.0." + string(rune('2'+i)) + ":50000"
		objs = append(objs, &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
			Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: v1alpha1.MachineRoleControlPlane, Address: address},
			Status: v1alpha1.TalosMachineStatus{
				Approval:      &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved},
				AppliedConfig: &v1alpha1.AppliedConfigStatus{Hash: "00", AppliedAt: metav1.NewTime(now)},
				Phase:         v1alpha1.MachinePhaseReady, NodeName: "node-" + name,
			},
		})
		dialer.Nodes[address] = &talostest.Node{UUID: name, Installed: true, Stage: "running"}
	}
	byCluster := func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, byCluster).
		Build()
	r := &Reconciler{Client: c, Secrets: c, Dialer: dialer, Recorder: eventstest.New(t, 100),
		Options: Options{CallTimeout: 2 * time.Second}.withDefaults(), Now: func() time.Time { return now }}
	return &fixture{t: t, client: c, dialer: dialer, r: r}
}

func (f *fixture) reconcile() *v1alpha1.TalosCluster {
	f.t.Helper()
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "demo"}}); err != nil {
		f.t.Fatal(err)
	}
	return f.cluster()
}

// cluster reads demo.
func (f *fixture) cluster() *v1alpha1.TalosCluster {
	f.t.Helper()
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	return &c
}

func (f *fixture) node(name string) *talostest.Node {
	for _, n := range f.dialer.Nodes {
		if n.UUID == name {
			return n
		}
	}
	f.t.Fatalf("no node %s", name)
	return nil
}

func bootstrapped(c *v1alpha1.TalosCluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionBootstrapped); cond != nil {
		return string(cond.Status) + " " + cond.Reason
	}
	return ""
}

func TestBootstrapsOnceOnTheFirstControlPlane(t *testing.T) {
	f := newFixture(t, nil)
	c := f.reconcile()
	if c.Status.BootstrappedAt == nil || bootstrapped(c) != "True "+v1alpha1.ClusterReasonBootstrapped {
		t.Fatalf("after the first look: bootstrappedAt %v, Bootstrapped %s", c.Status.BootstrappedAt, bootstrapped(c))
	}
	f.reconcile()
	f.reconcile()
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		want := []string(nil)
		if name == "cp-1" {
			want = []string{"bootstrap"}
		}
		if got := f.node(name).Calls; !slices.Equal(got, want) {
			t.Errorf("%s was asked %v, want %v", name, got, want)
		}
	}
}

// The record of the bootstrap was lost (or never written): a control plane
// that lists etcd members says it happened, and nothing bootstraps again.
func TestBootstrapRecordLostFindsEtcdRunning(t *testing.T) {
	f := newFixture(t, nil)
	f.node("cp-2").Etcd = true
	c := f.reconcile()
	if c.Status.BootstrappedAt == nil || bootstrapped(c) != "True "+v1alpha1.ClusterReasonBootstrapped {
		t.Fatalf("bootstrappedAt %v, Bootstrapped %s", c.Status.BootstrappedAt, bootstrapped(c))
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		if got := f.node(name).Calls; len(got) != 0 {
			t.Errorf("%s was asked %v", name, got)
		}
	}
}

// With a control plane down the bootstrap waits (a second etcd could start
// there later); an admin's override lets it go ahead with the ones that
// run, and is used up.
func TestBootstrapWaitsForEveryControlPlaneUnlessOverridden(t *testing.T) {
	f := newFixture(t, nil)
	f.node("cp-3").Stage = "booting"
	c := f.reconcile()
	if bootstrapped(c) != "False "+v1alpha1.ClusterReasonWaitingForControlPlane || c.Status.BootstrappedAt != nil {
		t.Fatalf("Bootstrapped %s, bootstrappedAt %v", bootstrapped(c), c.Status.BootstrappedAt)
	}
	if got := f.node("cp-1").Calls; len(got) != 0 {
		t.Fatalf("cp-1 was asked %v with cp-3 down", got)
	}

	g := newFixture(t, &v1alpha1.OverrideStatus{Check: v1alpha1.CheckBootstrapWaitsForControlPlanes, Reason: "cp-3 is gone",
		By: "carol", At: metav1.NewTime(time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC))})
	g.node("cp-3").Stage = "booting"
	c = g.reconcile()
	if c.Status.BootstrappedAt == nil || !slices.Equal(g.node("cp-1").Calls, []string{"bootstrap"}) {
		t.Fatalf("with the override: bootstrappedAt %v, cp-1 asked %v", c.Status.BootstrappedAt, g.node("cp-1").Calls)
	}
	if c.Status.Override != nil {
		t.Errorf("the override outlived its use: %+v", c.Status.Override)
	}
}

// A bundle that is not ready after the bootstrap takes nothing back: the
// cluster stays Bootstrapped, and Bootstrapped is True again on a cluster
// whose condition an earlier version set False then.
func TestBootstrappedStaysAfterTheBundleWasNotReady(t *testing.T) {
	f := newFixture(t, nil)
	if c := f.reconcile(); c.Status.BootstrappedAt == nil {
		t.Fatal("not bootstrapped")
	}
	setSecretsReady := func(status metav1.ConditionStatus) {
		t.Helper()
		c := f.cluster()
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionSecretsReady, Status: status,
			Reason: v1alpha1.ClusterReasonGenerated, LastTransitionTime: metav1.Now()})
		if err := f.client.Status().Update(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	setSecretsReady(metav1.ConditionFalse)
	if c := f.reconcile(); bootstrapped(c) != "True "+v1alpha1.ClusterReasonBootstrapped {
		t.Errorf("with the bundle not ready: Bootstrapped %s", bootstrapped(c))
	}
	// What an earlier version left: Bootstrapped False after the bootstrap.
	c := f.cluster()
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionBootstrapped, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ClusterReasonSecretsNotReady, Message: "the secrets bundle is not ready", LastTransitionTime: metav1.Now()})
	if err := f.client.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	setSecretsReady(metav1.ConditionTrue)
	if c := f.reconcile(); bootstrapped(c) != "True "+v1alpha1.ClusterReasonBootstrapped {
		t.Errorf("with the bundle ready again: Bootstrapped %s", bootstrapped(c))
	}
	if got := f.node("cp-1").Calls; !slices.Equal(got, []string{"bootstrap"}) {
		t.Errorf("cp-1 was asked %v, want one bootstrap", got)
	}
}
