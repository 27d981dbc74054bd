package clustersecrets

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// The secrets reconciler against a fake client, and what someone who may
// only create Secrets in the namespace tries: plant the bundle's Secret
// before the controller generates it, or while it does.

const testNS = "ns"

var testNow = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

type rig struct {
	t        *testing.T
	client   client.Client
	r        *Reconciler
	recorder *eventstest.Recorder
	// beforeCreate, when set, runs before each Secret is created; its error
	// is the create's.
	beforeCreate func(*corev1.Secret) error
}

func newRig(t *testing.T, cluster *v1alpha1.TalosCluster, objs ...client.Object) *rig {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	g := &rig{t: t, recorder: eventstest.New(t, 100)}
	g.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(append([]client.Object{cluster}, objs...)...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if s, ok := obj.(*corev1.Secret); ok && g.beforeCreate != nil {
					if err := g.beforeCreate(s); err != nil {
						return err
					}
				}
				return c.Create(ctx, obj, opts...)
			},
		}).Build()
	g.r = &Reconciler{Client: g.client, Secrets: g.client, Scheme: scheme, Recorder: g.recorder,
		ResyncInterval: time.Hour, RetryInterval: time.Minute, Now: func() time.Time { return testNow }}
	return g
}

func demoCluster() *v1alpha1.TalosCluster {
	return &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: testNS, UID: "uid-demo", Generation: 1},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"}},
	}
}

// planted is the bundle Secret someone who may create Secrets makes: a
// valid bundle of theirs, labelled as the controller labels its own and
// naming the cluster its controller (its UID is anyone's to read).
func planted(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	data, err := secretsbundle.Generate("v1.13.0", testNow)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": "demo"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TalosCluster",
				Name: "demo", UID: "uid-demo", Controller: ptr.To(true)}}},
		Type: secretsbundle.SecretType,
		Data: map[string][]byte{secretsbundle.BundleKey: data},
	}
}

func (g *rig) reconcile() error {
	g.t.Helper()
	_, err := g.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "demo"}})
	return err
}

func (g *rig) cluster() *v1alpha1.TalosCluster {
	g.t.Helper()
	var c v1alpha1.TalosCluster
	if err := g.client.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "demo"}, &c); err != nil {
		g.t.Fatal(err)
	}
	return &c
}

func (g *rig) secret(name string) *corev1.Secret {
	g.t.Helper()
	var s corev1.Secret
	if err := g.client.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, &s); err != nil {
		return nil
	}
	return &s
}

// secretsReady is the cluster's SecretsReady condition.
func (g *rig) secretsReady() metav1.Condition {
	g.t.Helper()
	c := meta.FindStatusCondition(g.cluster().Status.Conditions, v1alpha1.ClusterConditionSecretsReady)
	if c == nil {
		g.t.Fatal("no SecretsReady condition")
	}
	return *c
}

// warned reports whether a Warning Event with reason was recorded.
func (g *rig) warned(reason string) bool {
	for {
		select {
		case e := <-g.recorder.Events:
			if strings.HasPrefix(e, corev1.EventTypeWarning+" "+reason+" ") {
				return true
			}
		default:
			return false
		}
	}
}

// refusedWith checks that Load refuses the cluster's Secret with reason.
func (g *rig) refusedWith(reason string) {
	g.t.Helper()
	_, err := bundlestore.Load(context.Background(), g.client, g.cluster())
	var refusal *bundlestore.Refusal
	if !errors.As(err, &refusal) || refusal.Reason != reason {
		g.t.Fatalf("Load: %v, want a refusal with reason %s", err, reason)
	}
}

// TestPlantedBundleIsNeverUsed: a bundle planted before the controller
// generates one, naming the cluster its controller, is neither used nor
// overwritten, however often the controller looks; the cluster says why.
func TestPlantedBundleIsNeverUsed(t *testing.T) {
	bad := planted(t, "demo-secrets")
	g := newRig(t, demoCluster(), bad)
	for range 2 {
		if err := g.reconcile(); err != nil {
			t.Fatal(err)
		}
		if c := g.secretsReady(); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ClusterReasonSecretConflict {
			t.Fatalf("SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	if !g.warned(v1alpha1.ClusterReasonSecretConflict) {
		t.Error("no Warning Event says why")
	}
	if d := g.cluster().Status.SecretsDigest; d != "" {
		t.Errorf("a digest was recorded for a bundle the controller did not generate: %s", d)
	}
	if s := g.secret("demo-secrets"); s == nil || string(s.Data[secretsbundle.BundleKey]) != string(bad.Data[secretsbundle.BundleKey]) {
		t.Error("the planted Secret was changed")
	}
	g.refusedWith(v1alpha1.ClusterReasonSecretConflict)
}

// TestBundlePlantedWhileGeneratingIsNeverUsed: a bundle planted between
// the controller recording its digest and writing its Secret is refused,
// and left as it is; once deleted, a bundle is generated anew.
func TestBundlePlantedWhileGeneratingIsNeverUsed(t *testing.T) {
	g := newRig(t, demoCluster())
	bad := planted(t, "demo-secrets")
	g.beforeCreate = func(s *corev1.Secret) error {
		g.beforeCreate = nil
		return g.client.Create(context.Background(), bad.DeepCopy())
	}
	for range 2 {
		if err := g.reconcile(); err != nil {
			t.Fatal(err)
		}
		if c := g.secretsReady(); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ClusterReasonSecretDigestMismatch {
			t.Fatalf("SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	if !g.warned(v1alpha1.ClusterReasonSecretDigestMismatch) {
		t.Error("no Warning Event says why")
	}
	recorded := g.cluster().Status.SecretsDigest
	if recorded == "" || recorded == secretsbundle.Digest(bad.Data[secretsbundle.BundleKey]) {
		t.Fatalf("status.secretsDigest %q", recorded)
	}
	if s := g.secret("demo-secrets"); s == nil || string(s.Data[secretsbundle.BundleKey]) != string(bad.Data[secretsbundle.BundleKey]) {
		t.Fatal("the planted Secret was changed")
	}
	g.refusedWith(v1alpha1.ClusterReasonSecretDigestMismatch)

	// An admin deletes it: another bundle is generated.
	if err := g.client.Delete(context.Background(), g.secret("demo-secrets")); err != nil {
		t.Fatal(err)
	}
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := g.secretsReady(); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ClusterReasonGenerated {
		t.Fatalf("after the planted Secret went: SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if got := g.cluster().Status.SecretsDigest; got == recorded || got != secretsbundle.Digest(g.secret("demo-secrets").Data[secretsbundle.BundleKey]) {
		t.Errorf("status.secretsDigest %q is not the new bundle's", got)
	}
	if _, err := bundlestore.Load(context.Background(), g.client, g.cluster()); err != nil {
		t.Fatal(err)
	}
}

// TestGenerateResumesAfterACrash: stopped between recording the digest
// and writing the Secret, the controller generates another bundle, records
// its digest and writes it.
func TestGenerateResumesAfterACrash(t *testing.T) {
	g := newRig(t, demoCluster())
	g.beforeCreate = func(*corev1.Secret) error {
		g.beforeCreate = nil
		return errors.New("injected: the controller stopped before it wrote the Secret")
	}
	if err := g.reconcile(); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("reconcile: %v", err)
	}
	first := g.cluster().Status.SecretsDigest
	if first == "" || g.secret("demo-secrets") != nil {
		t.Fatalf("digest %q, Secret %v: the digest goes first", first, g.secret("demo-secrets") != nil)
	}
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := g.secret("demo-secrets")
	if c := g.secretsReady(); s == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ClusterReasonGenerated {
		t.Fatalf("SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if got := g.cluster().Status.SecretsDigest; got == first || got != secretsbundle.Digest(s.Data[secretsbundle.BundleKey]) {
		t.Errorf("status.secretsDigest %q, want the stored bundle's", got)
	}
	if !metav1.IsControlledBy(s, g.cluster()) || s.Type != secretsbundle.SecretType {
		t.Errorf("the generated Secret: owners %+v, type %s", s.OwnerReferences, s.Type)
	}
	if _, err := bundlestore.Load(context.Background(), g.client, g.cluster()); err != nil {
		t.Fatal(err)
	}
}

// TestChangedBundleIsRefused: a generated bundle whose Secret was changed
// since is used by no one, and not overwritten.
func TestChangedBundleIsRefused(t *testing.T) {
	g := newRig(t, demoCluster())
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := g.secret("demo-secrets")
	other := planted(t, "demo-secrets").Data[secretsbundle.BundleKey]
	s.Data[secretsbundle.BundleKey] = other
	if err := g.client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	g.refusedWith(v1alpha1.ClusterReasonSecretDigestMismatch)
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := g.secretsReady(); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ClusterReasonSecretDigestMismatch {
		t.Fatalf("SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if string(g.secret("demo-secrets").Data[secretsbundle.BundleKey]) != string(other) {
		t.Error("the changed Secret was overwritten")
	}
}

// TestBundleFromBeforeDigestsIsAdoptedOnce: a cluster whose bundle the
// controller generated before it recorded digests (it said so: SecretsReady
// True, Generated; the Secret names the cluster its controller) has the
// digest of that bundle recorded, once; any other Secret of that name, or
// a cluster that never said so, adopts nothing.
func TestBundleFromBeforeDigestsIsAdoptedOnce(t *testing.T) {
	said := func(c *v1alpha1.TalosCluster, reason string) *v1alpha1.TalosCluster {
		c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ClusterConditionSecretsReady, Status: metav1.ConditionTrue,
			Reason: reason, LastTransitionTime: metav1.NewTime(testNow)}}
		return c
	}
	unowned := planted(t, "demo-secrets")
	unowned.OwnerReferences = nil
	for _, tc := range []struct {
		name    string
		cluster *v1alpha1.TalosCluster
		secret  *corev1.Secret
		adopted bool
	}{
		{"generated before", said(demoCluster(), v1alpha1.ClusterReasonGenerated), planted(t, "demo-secrets"), true},
		{"never said Generated", demoCluster(), planted(t, "demo-secrets"), false},
		{"said Provided", said(demoCluster(), v1alpha1.ClusterReasonProvided), planted(t, "demo-secrets"), false},
		{"not its controller", said(demoCluster(), v1alpha1.ClusterReasonGenerated), unowned, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, tc.cluster, tc.secret)
			if err := g.reconcile(); err != nil {
				t.Fatal(err)
			}
			c, digest := g.secretsReady(), g.cluster().Status.SecretsDigest
			if !tc.adopted {
				if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ClusterReasonSecretConflict || digest != "" {
					t.Fatalf("SecretsReady %s %s, digest %q: adopted", c.Status, c.Reason, digest)
				}
				return
			}
			if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ClusterReasonGenerated || digest != secretsbundle.Digest(tc.secret.Data[secretsbundle.BundleKey]) {
				t.Fatalf("SecretsReady %s %s, digest %q: not adopted", c.Status, c.Reason, digest)
			}
			if _, err := bundlestore.Load(context.Background(), g.client, g.cluster()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSecretsReadySaysWhenRotationCAsAreNotRecorded: a Secret in the place
// of a rotation's new CAs holding others turns SecretsReady False.
func TestSecretsReadySaysWhenRotationCAsAreNotRecorded(t *testing.T) {
	cluster := demoCluster()
	ours, err := secretsbundle.NewRotationCAs(cluster, true, false, testNow)
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(t, cluster)
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	c := g.cluster()
	c.Status.CARotation = &v1alpha1.CARotationStatus{Operation: "rotate", Phase: v1alpha1.CARotationAcceptNew, Talos: true, SecretDigest: ours.Digest}
	if err := g.client.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	theirs, err := secretsbundle.NewRotationCAs(cluster, true, false, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := bundlestore.StoreRotationCAs(context.Background(), g.client, cluster, theirs); err != nil {
		t.Fatal(err)
	}
	if err := g.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := g.secretsReady(); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ClusterReasonSecretDigestMismatch ||
		!strings.Contains(c.Message, "demo-secrets-ca-next") {
		t.Fatalf("SecretsReady %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if !g.warned(v1alpha1.ClusterReasonSecretDigestMismatch) {
		t.Error("no Warning Event says why")
	}
}
