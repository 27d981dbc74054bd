package operation

import (
	"testing"
	"time"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStatusAppliesKeepToTheirRows: what TalosOperations apply to a
// machine's or a cluster's status keeps to the rows of the table of
// status writers: an upgrade's Talos version (its row's status.kubernetes
// is a merge patch's, not an apply's), and each rotation entering a phase,
// all of its row.
func TestStatusAppliesKeepToTheirRows(t *testing.T) {
	newReconciler := func(t *testing.T, cluster *v1alpha1.TalosCluster) (*Reconciler, *statusapplytest.Recorder) {
		c, applied := statusapplytest.Client(t, cluster)
		return &Reconciler{Client: c, APIReader: c, Secrets: c, Recorder: eventstest.New(t, 10),
			Options: Options{}.withDefaults(), Now: time.Now}, applied
	}
	opOf := func(name string, spec v1alpha1.TalosOperationSpec) *run {
		op := started(name, spec)
		op.Namespace = statusapplytest.Namespace
		return &run{op: op}
	}

	t.Run("talos-upgrade", func(t *testing.T) {
		c, applied := statusapplytest.Client(t)
		if err := recordVersion(t.Context(), c, statusapplytest.Machine(), "v1.13.1"); err != nil {
			t.Fatal(err)
		}
		applied.CheckOwned(t, false)
	})
	t.Run("ca-rotation", func(t *testing.T) {
		cluster := statusapplytest.Cluster()
		cluster.Status.CARotation = nil
		r, applied := newReconciler(t, cluster)
		x := opOf("rotate", v1alpha1.TalosOperationSpec{ClusterName: cluster.Name, Type: v1alpha1.OperationCARotation})
		if err := r.enterCAPhase(t.Context(), x, v1alpha1.CARotationPhases[0]); err != nil {
			t.Fatal(err)
		}
		applied.CheckOwned(t, true)
	})
	t.Run("key-rotation", func(t *testing.T) {
		cluster := statusapplytest.Cluster()
		cluster.Status.DiskKeyRotation = nil
		r, applied := newReconciler(t, cluster)
		x := opOf("rekey", v1alpha1.TalosOperationSpec{ClusterName: cluster.Name, Type: v1alpha1.OperationKeyRotation})
		if err := r.enterDiskKeyPhase(t.Context(), x, v1alpha1.DiskKeyRotationPhases[0], 2); err != nil {
			t.Fatal(err)
		}
		applied.CheckOwned(t, true)
	})
	t.Run("key-rotation of Kubernetes keys", func(t *testing.T) {
		cluster := statusapplytest.Cluster()
		cluster.Status.KubernetesKeyRotation = nil
		data, err := secretsbundle.Generate("v1.14.1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cluster.Status.SecretsDigest = secretsbundle.Digest(data)
		bundle := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: secretsbundle.SecretName(cluster)},
			Data: map[string][]byte{secretsbundle.BundleKey: data}}
		c, applied := statusapplytest.Client(t, cluster, bundle)
		r := &Reconciler{Client: c, APIReader: c, Secrets: c, Recorder: eventstest.New(t, 10), Options: Options{}.withDefaults(), Now: time.Now}
		x := opOf("rekey-kube", v1alpha1.TalosOperationSpec{ClusterName: cluster.Name, Type: v1alpha1.OperationKeyRotation,
			KeyRotation: &v1alpha1.KeyRotationParameters{Keys: []v1alpha1.RotatableKey{v1alpha1.KeyServiceAccount, v1alpha1.KeySecretsEncryption}}})
		if err := r.enterKeyPhase(t.Context(), x, v1alpha1.CARotationAcceptNew); err != nil {
			t.Fatal(err)
		}
		applied.CheckOwned(t, true)
	})
}
