package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/credentialrequest"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/integration/itest"
)

// TestCredentialsNotServedAgainToARecreatedRequest: the new admin
// credentials of a CA rotation go to the request that took them, once. The
// admin who took them deletes that request and creates one of the same
// name again, with the controller's mark of a request taking them forged
// in its status: the server drops the status, refuses carol's own write of
// it, and the controller (its reconciler, as its ServiceAccount) denies the
// request.
func TestCredentialsNotServedAgainToARecreatedRequest(t *testing.T) {
	ctx := t.Context()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	itest.MustApply(ctx, t, `
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: demo, namespace: `+ns+`}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "https://127.0.7.1:6443"}, paused: true,
  secretsRef: {name: demo-secrets}}
`)
	bundle, err := secretsbundle.Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(itest.CP.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets"},
		Data: map[string][]byte{secretsbundle.BundleKey: bundle}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A CA rotation completed: its credentials wait to be taken.
	asController := itest.ControllerClient(t)
	var cluster v1alpha1.TalosCluster
	if err := asController.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Status.Credentials = &v1alpha1.ClusterCredentialsStatus{Rotation: "rotate", RotatedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
	if err := asController.Status().Update(ctx, &cluster); err != nil {
		t.Fatal(err)
	}
	r := &credentialrequest.Reconciler{Client: asController, Secrets: asController, Recorder: eventstest.New(t, 100),
		Options: credentialrequest.Options{Retention: time.Hour}, Now: time.Now}
	carol := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosCredentialRequests(ns)
	request := func(status v1alpha1.TalosCredentialRequestStatus) *v1alpha1.TalosCredentialRequest {
		t.Helper()
		created, err := carol.Create(ctx, &v1alpha1.TalosCredentialRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "carols"},
			Spec:       v1alpha1.TalosCredentialRequestSpec{ClusterName: "demo", Purpose: v1alpha1.PurposeCredentials, PublicKey: itest.APIPublicKeyPEM(t)},
			Status:     status,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "carols"}}); err != nil {
			t.Fatal(err)
		}
		got, err := carol.Get(ctx, "carols", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != created.UID {
			t.Fatalf("the request was replaced while it was answered")
		}
		return got
	}

	first := request(v1alpha1.TalosCredentialRequestStatus{})
	if !meta.IsStatusConditionTrue(first.Status.Conditions, v1alpha1.CredentialRequestIssued) || first.Status.KubernetesCertificate == "" {
		t.Fatalf("the first request was not issued the credentials: %+v", first.Status.Conditions)
	}
	if err := carol.Delete(ctx, "carols", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	mark := metav1.Condition{Type: v1alpha1.CredentialRequestIssued, Status: metav1.ConditionUnknown, Reason: "TakingCredentials",
		Message: "taking the new admin credentials", LastTransitionTime: metav1.Now()}
	again := request(v1alpha1.TalosCredentialRequestStatus{Conditions: []metav1.Condition{mark}})
	denied := meta.FindStatusCondition(again.Status.Conditions, v1alpha1.CredentialRequestDenied)
	if denied == nil || denied.Status != metav1.ConditionTrue || denied.Reason != v1alpha1.CredentialRequestReasonAlreadyServed ||
		again.Status.Certificate != "" || again.Status.KubernetesCertificate != "" {
		t.Fatalf("a request re-created under the name of the one that took the credentials: %+v, a certificate: %t",
			again.Status.Conditions, again.Status.Certificate != "")
	}
	again.Status.Conditions = []metav1.Condition{mark}
	if _, err := carol.UpdateStatus(ctx, again, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("an admin wrote a credential request's status: %v, want Forbidden", err)
	}
}
