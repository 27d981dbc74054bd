package credentialrequest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// The new admin credentials of a CA rotation go once to the request that
// took them: its answer may be written again after a lost write, but a
// request re-created under its name, by the same admin, is refused.
func TestCredentialsServedOnceByRequestNotName(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	bundle, err := secretsbundle.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
		Spec:       v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"}},
		Status: v1alpha1.TalosClusterStatus{SecretsDigest: secretsbundle.Digest(bundle), Credentials: &v1alpha1.ClusterCredentialsStatus{
			Rotation: "rotate", RotatedAt: metav1.NewTime(now.Add(-time.Hour)),
		}},
	}
	failAnswer := true
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(cluster, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: "ns"},
			Data:       map[string][]byte{secretsbundle.BundleKey: bundle},
		}).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosCredentialRequest{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if cr, ok := obj.(*v1alpha1.TalosCredentialRequest); ok && failAnswer &&
					meta.IsStatusConditionTrue(cr.Status.Conditions, v1alpha1.CredentialRequestIssued) {
					failAnswer = false
					return errors.New("injected: the controller stopped before it wrote the answer")
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	r := &Reconciler{Client: c, Secrets: c, Recorder: eventstest.New(t, 100), Options: Options{Retention: time.Minute},
		Now: func() time.Time { return now }}

	create := func(uid string) {
		t.Helper()
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &v1alpha1.TalosCredentialRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "carols", Namespace: "ns", UID: types.UID(uid)},
			Spec: v1alpha1.TalosCredentialRequestSpec{ClusterName: "demo", Purpose: v1alpha1.PurposeCredentials, Username: "carol",
				PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
		}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile := func() *v1alpha1.TalosCredentialRequest {
		t.Helper()
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "carols"}})
		var cr v1alpha1.TalosCredentialRequest
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "carols"}, &cr); err != nil {
			t.Fatal(err)
		}
		return &cr
	}

	// The first request takes them; its answer is lost, and written again.
	create("uid-1")
	if cr := reconcile(); cr.Status.Certificate != "" {
		t.Fatalf("the lost answer was written: %+v", cr.Status.Conditions)
	}
	var got v1alpha1.TalosCluster
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), &got); err != nil {
		t.Fatal(err)
	}
	if cs := got.Status.Credentials; cs.ServedTo != "carol" || cs.Request != "carols" || cs.ServedAt == nil {
		t.Fatalf("the cluster's record after the take: %+v", cs)
	}
	if cr := reconcile(); !meta.IsStatusConditionTrue(cr.Status.Conditions, v1alpha1.CredentialRequestIssued) ||
		cr.Status.Certificate == "" || cr.Status.KubernetesCertificate == "" {
		t.Fatalf("the request that took them was not answered again: %+v", cr.Status.Conditions)
	}

	// Deleted and created again under the same name, by the same admin: refused.
	if err := c.Delete(ctx, &v1alpha1.TalosCredentialRequest{ObjectMeta: metav1.ObjectMeta{Name: "carols", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	create("uid-2")
	cr := reconcile()
	denied := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestDenied)
	if denied == nil || denied.Reason != v1alpha1.CredentialRequestReasonAlreadyServed || cr.Status.Certificate != "" || cr.Status.KubernetesCertificate != "" ||
		meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestIssued) != nil {
		t.Fatalf("a request re-created under the name of the one that took the credentials: conditions %+v, certificate issued: %t",
			cr.Status.Conditions, cr.Status.Certificate != "")
	}
}
