package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/operation"
	"ichor.dev/ichor/pkg/controller/taloscluster"
	"ichor.dev/ichor/pkg/events/eventstest"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/integration/itest"
)

// TestPlantedSecretsAreNeverUsed: mallory may create Secrets in the
// namespace and read clusters, nothing more (a GitOps repository's
// account). She plants demo's bundle before ichor-controller generates it,
// naming the cluster its controller, and the new CAs of another cluster's
// CA rotation: ichor-controller uses neither, changes neither, and each
// cluster says why. The digests it records are its own fields, which the
// other status writers leave alone.
func TestPlantedSecretsAreNeverUsed(t *testing.T) {
	ctx := t.Context()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	itest.MustApply(ctx, t, `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-creator, namespace: `+ns+`}
rules: [{apiGroups: [""], resources: [secrets], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: mallory-creates-secrets, namespace: `+ns+`}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: secret-creator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}]
---
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: demo, namespace: `+ns+`}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "https://127.0.7.1:6443"}, paused: true}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: other, namespace: `+ns+`}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "https://127.0.7.2:6443"}, paused: true}
`)
	asMallory := itest.CP.ConfigFor("mallory", "ichor:viewer")
	demo, err := itest.APIClientFor(t, asMallory).IchorV1alpha1().TalosClusters(ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := secretsbundle.Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	plant := func(s *corev1.Secret) {
		t.Helper()
		s.Labels = map[string]string{"app.kubernetes.io/managed-by": "ichor-controller"}
		if _, err := kubernetes.NewForConfigOrDie(asMallory).CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("mallory plants Secret %s: %v", s.Name, err)
		}
	}
	plant(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TalosCluster", Name: "demo", UID: demo.UID, Controller: ptr.To(true)}}},
		Type: secretsbundle.SecretType,
		Data: map[string][]byte{secretsbundle.BundleKey: mine},
	})

	scheme, err := ctrlcmd.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	asController := itest.ControllerClient(t)
	recorder := eventstest.New(t, 100)
	r := &clustersecrets.Reconciler{Client: asController, Secrets: asController, Scheme: scheme, Recorder: recorder,
		ResyncInterval: time.Hour, RetryInterval: time.Hour, Now: time.Now}
	reconcile := func(name string) *v1alpha1.TalosCluster {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
			t.Fatalf("reconcile %s: %v", name, err)
		}
		return itest.GetCluster(t, ns, name)
	}
	refused := func(c *v1alpha1.TalosCluster, reason string) {
		t.Helper()
		if !itest.HasCondition(c.Status.Conditions, v1alpha1.ClusterConditionSecretsReady, metav1.ConditionFalse, reason) {
			t.Errorf("%s: SecretsReady %+v, want False %s", c.Name, c.Status.Conditions, reason)
		}
		_, err := bundlestore.Load(ctx, asController, c)
		var refusal *bundlestore.Refusal
		if !errors.As(err, &refusal) || refusal.Reason != reason {
			t.Errorf("%s: the secrets in force: %v, want a refusal %s", c.Name, err, reason)
		}
	}

	// The planted bundle.
	got := reconcile("demo")
	refused(got, v1alpha1.ClusterReasonSecretConflict)
	if got.Status.SecretsDigest != "" {
		t.Errorf("a digest was recorded for mallory's bundle")
	}
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Warning "+v1alpha1.ClusterReasonSecretConflict) {
			t.Errorf("Event %q, want a Warning saying why", e)
		}
	default:
		t.Error("no Event says why")
	}
	s, err := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig).CoreV1().Secrets(ns).Get(ctx, "demo-secrets", metav1.GetOptions{})
	if err != nil || string(s.Data[secretsbundle.BundleKey]) != string(mine) {
		t.Errorf("mallory's Secret was changed: %v", err)
	}

	// A generated bundle: its digest is recorded under its own field
	// manager, and stays through the other writers' writes from older copies.
	var stale v1alpha1.TalosCluster
	if err := asController.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &stale); err != nil {
		t.Fatal(err)
	}
	got = reconcile("other")
	s, err = kubernetes.NewForConfigOrDie(itest.CP.AdminConfig).CoreV1().Secrets(ns).Get(ctx, "other-secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	digest := secretsbundle.Digest(s.Data[secretsbundle.BundleKey])
	if got.Status.SecretsDigest != digest ||
		!itest.HasCondition(got.Status.Conditions, v1alpha1.ClusterConditionSecretsReady, metav1.ConditionTrue, v1alpha1.ClusterReasonGenerated) {
		t.Fatalf("generated: digest recorded %v, conditions %+v", got.Status.SecretsDigest == digest, got.Status.Conditions)
	}
	owned := false
	for _, f := range got.ManagedFields {
		owned = owned || (f.Manager == bundlestore.DigestFieldManager && f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), `"f:secretsDigest"`))
	}
	if !owned {
		t.Errorf("status.secretsDigest is not %s's: %+v", bundlestore.DigestFieldManager, got.ManagedFields)
	}
	stale.Status.Phase = v1alpha1.ClusterPhasePending
	if err := taloscluster.WriteStatus(ctx, asController, &stale); err != nil {
		t.Fatal(err)
	}

	// A CA rotation records its new CAs' digest, as the operation does,
	// and mallory plants CAs of hers in their place before they are stored.
	next, err := secretsbundle.NewRotationCAs(got, true, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rotation := ichorac.TalosCluster("other", ns).WithStatus(ichorac.TalosClusterStatus().WithCARotation(ichorac.CARotationStatus().
		WithOperation("rotate").WithPhase(v1alpha1.CARotationAcceptNew).WithTalos(true).WithSecretDigest(next.Digest)))
	if err := asController.Status().Apply(ctx, rotation, client.FieldOwner(operation.CARotationFieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	theirs, err := secretsbundle.NewRotationCAs(got, true, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	plant(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "other-secrets-ca-next", Annotations: map[string]string{"ichor.dev/ca-rotation": "uid-of-rotate"}},
		Type:       v1alpha1.SecretTypeCARotation,
		Data:       map[string][]byte{"talos.crt": theirs.Talos.Crt, "talos.key": theirs.Talos.Key},
	})
	if err := bundlestore.StoreRotationCAs(ctx, asController, got, next); err == nil {
		t.Error("the rotation stored its CAs over mallory's")
	}
	got = reconcile("other")
	refused(got, v1alpha1.ClusterReasonSecretDigestMismatch)
	if got.Status.SecretsDigest != digest || got.Status.CARotation == nil || got.Status.CARotation.SecretDigest != next.Digest {
		t.Errorf("the recorded digests were lost: %q, %+v", got.Status.SecretsDigest, got.Status.CARotation)
	}
}
