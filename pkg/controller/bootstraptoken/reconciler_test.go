package bootstraptoken

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// newReconciler is a reconciler of cluster demo, with a generated bundle
// and its Kubernetes endpoint a closed loopback port, over a fake client
// that counts the status applies.
func newReconciler(t *testing.T, bootstrapped bool) (*Reconciler, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", Generation: 1},
		Spec:       v1alpha1.TalosClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://127.0.0.1:1"}},
		Status: v1alpha1.TalosClusterStatus{Conditions: []metav1.Condition{{
			Type: v1alpha1.ClusterConditionSecretsReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ClusterReasonGenerated,
			LastTransitionTime: metav1.NewTime(now)}}},
	}
	if bootstrapped {
		cluster.Status.BootstrappedAt = &metav1.Time{Time: now}
	}
	bundle, err := secretsbundle.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(bundle)
	applies := new(int)
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(cluster, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: "ns"},
			Data:       map[string][]byte{secretsbundle.BundleKey: bundle},
		}).
		WithStatusSubresource(&v1alpha1.TalosCluster{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceApply: func(context.Context, client.Client, string, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
			*applies++
			return nil
		}}).
		Build()
	r := &Reconciler{Client: c, Secrets: c, Recorder: eventstest.New(t, 10),
		Options: Options{CallTimeout: 2 * time.Second}.withDefaults(), Now: func() time.Time { return now }}
	return r, applies
}

func (r *Reconciler) reconcileDemo(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "demo"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestNoKubernetesYet: before the bootstrap, and while the cluster's
// Kubernetes API does not answer, the token is left as it is, and looked
// at again soon.
func TestNoKubernetesYet(t *testing.T) {
	for _, bootstrapped := range []bool{false, true} {
		r, applies := newReconciler(t, bootstrapped)
		if res := r.reconcileDemo(t); res.RequeueAfter != r.Options.PollInterval {
			t.Errorf("bootstrapped %t: requeue after %v, want %v", bootstrapped, res.RequeueAfter, r.Options.PollInterval)
		}
		if *applies != 0 {
			t.Errorf("bootstrapped %t: %d status applies, want none", bootstrapped, *applies)
		}
	}
}

// TestWriteStatusTakesOwnership: the condition is written when it changed,
// and once unchanged when the reconciler does not own it yet (the cluster
// health reconciler wrote it before there was this one).
func TestWriteStatusTakesOwnership(t *testing.T) {
	r, applies := newReconciler(t, true)
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo"}, &cluster); err != nil {
		t.Fatal(err)
	}
	cond := metav1.Condition{Type: v1alpha1.ClusterConditionBootstrapTokenEnabled, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ClusterReasonAllMachinesJoined, LastTransitionTime: metav1.NewTime(now)}
	cluster.Status.Conditions = append(cluster.Status.Conditions, cond)
	write := func() int {
		t.Helper()
		before := *applies
		if err := writeStatus(context.Background(), r.Client, &cluster, cluster.Status.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		return *applies - before
	}
	if n := write(); n != 1 {
		t.Errorf("unchanged, owned by another: %d applies, want 1", n)
	}
	cluster.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, Subresource: "status"}}
	if n := write(); n != 0 {
		t.Errorf("unchanged, owned: %d applies, want none", n)
	}
	before := cluster.Status.DeepCopy()
	cluster.Status.Conditions[1].Status = metav1.ConditionTrue
	if err := writeStatus(context.Background(), r.Client, &cluster, before); err != nil || *applies != 2 {
		t.Errorf("changed: %d applies in all, want 2 (%v)", *applies, err)
	}
}
