// Package clustersecrets makes sure every TalosCluster has its secrets
// bundle (the Talos, Kubernetes and etcd CAs, keys and tokens the cluster's
// configs are rendered from). A cluster that names a Secret in
// spec.secretsRef uses that one, an admin's choice; a cluster that names
// none gets a bundle generated with machinery's secrets package into
// <cluster>-secrets, owned by the cluster. The SHA-256 of a generated
// bundle is recorded in status.secretsDigest, which only ichor-controller
// writes, before the Secret is: a Secret of that name holding anything
// else — planted before, or in between — is never used, whatever its
// owners or annotations say. Its SecretsReady condition says which, or
// what is wrong.
//
// What a bundle is — generated, parsed, digested, named — is
// pkg/secretsbundle's; reading and writing it, with its digest checks, is
// pkg/bundlestore's, which every reconciler loads the secrets in force
// with. This reconciler decides when to generate, check or adopt one, and
// says so. The bundle never appears in a log line, an Event, a status or an
// error message: those name the Secret and the fields that are wrong, never
// values. Secrets are read with a client that does not cache, so the
// controller needs neither list nor watch on them.
package clustersecrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/statusapply"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "taloscluster-secrets"

// SecretsClusterRole is the ClusterRole (artifacts/controller-rbac.yaml)
// that lets ichor-controller get and create Secrets where it is bound: in
// each namespace that holds TalosClusters, and nowhere else.
const SecretsClusterRole = "ichor-controller-secrets"

// Defaults of the Reconciler's intervals.
const (
	DefaultResyncInterval = 10 * time.Minute
	DefaultRetryInterval  = 30 * time.Second
)

// Reconciler gives each TalosCluster its secrets bundle.
type Reconciler struct {
	// Client writes Secrets and status.
	Client client.Client
	// Secrets reads Secrets, and the TalosCluster whose digests they are
	// checked against, without a cache.
	Secrets  client.Reader
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// ResyncInterval is how often a cluster with a good bundle is checked
	// again; RetryInterval, one without. Secrets are not watched, so these
	// are how a Secret created, fixed or deleted later is noticed.
	ResyncInterval, RetryInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler; it wakes on spec changes and
// on a new digest or CA rotation phase, not on the conditions it writes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ResyncInterval <= 0 {
		r.ResyncInterval = DefaultResyncInterval
	}
	if r.RetryInterval <= 0 {
		r.RetryInterval = DefaultRetryInterval
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, digestsChanged()))).
		Complete(r)
}

// digestsChanged passes an update that records another digest or moves a
// CA rotation: what the Secrets are checked against changed.
func digestsChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosCluster)
			return ok1 && ok2 && (o.Status.SecretsDigest != n.Status.SecretsDigest || !equality.Semantic.DeepEqual(o.Status.CARotation, n.Status.CARotation))
		},
	}
}

// Reconcile checks, or generates, one cluster's bundle.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Read fresh: the Secrets are checked against the digests it records.
	var cluster v1alpha1.TalosCluster
	if err := r.Secrets.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	name := secretsbundle.SecretName(&cluster)
	logger := log.FromContext(ctx).WithValues("secret", name)

	cond, err := r.ensureBundle(ctx, &cluster, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	prev := meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady)
	changed := prev == nil || prev.Status != cond.Status || prev.Reason != cond.Reason
	if err := r.writeStatus(ctx, &cluster, cond); err != nil {
		return ctrl.Result{}, err
	}
	if changed {
		r.announce(&cluster, cond)
		logger.Info("Secrets bundle checked", "ready", cond.Status, "reason", cond.Reason)
	}
	if cond.Status != metav1.ConditionTrue {
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.ResyncInterval}, nil
}

// ensureBundle finds, checks or generates the bundle, and checks the new
// CAs of a CA rotation, and says how it went.
func (r *Reconciler) ensureBundle(ctx context.Context, cluster *v1alpha1.TalosCluster, name string) (metav1.Condition, error) {
	generated := cluster.Spec.SecretsRef == nil
	cond := func(status metav1.ConditionStatus, reason, format string, args ...any) (metav1.Condition, error) {
		return metav1.Condition{Type: v1alpha1.ClusterConditionSecretsReady, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}, nil
	}
	refused := func(err error) (metav1.Condition, error) {
		var refusal *bundlestore.Refusal
		if errors.As(err, &refusal) {
			return cond(metav1.ConditionFalse, refusal.Reason, "%s", refusal.Message)
		}
		return metav1.Condition{}, err
	}

	var secret corev1.Secret
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, &secret)
	switch {
	case apierrors.IsNotFound(err) && generated:
		if err := r.generate(ctx, cluster, name); err != nil {
			return refused(err)
		}
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventSecretsGenerated, "GenerateSecretsBundle",
			"Generated a secrets bundle for Talos %s into Secret %s", cluster.Spec.TalosVersion, name)
		return cond(metav1.ConditionTrue, v1alpha1.ClusterReasonGenerated, "the bundle was generated into Secret %s, its SHA-256 recorded in status.secretsDigest", name)
	case apierrors.IsNotFound(err):
		return cond(metav1.ConditionFalse, v1alpha1.ClusterReasonSecretNotFound,
			"Secret %s named by spec.secretsRef does not exist; create it with the bundle in key %s (talosctl gen secrets), or clear spec.secretsRef to have one generated",
			name, secretsbundle.BundleKey)
	case apierrors.IsForbidden(err):
		return cond(metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsForbidden,
			"ichor-controller may not read Secrets in namespace %s: an admin binds it there with "+
				"kubectl create rolebinding ichor-controller-secrets -n %s --clusterrole=%s --serviceaccount=<ichor namespace>:ichor-controller",
			cluster.Namespace, cluster.Namespace, SecretsClusterRole)
	case err != nil:
		return metav1.Condition{}, fmt.Errorf("read Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	if adoptable(cluster, &secret) {
		if _, err := secretsbundle.Parse(secret.Data[secretsbundle.BundleKey]); err == nil {
			if err := bundlestore.RecordDigest(ctx, r.Client, cluster, secretsbundle.Digest(secret.Data[secretsbundle.BundleKey])); err != nil {
				return metav1.Condition{}, err
			}
			events.Record(r.Recorder, cluster, nil, v1alpha1.EventSecretsDigestRecorded, "RecordSecretsDigest",
				"Recorded the SHA-256 of the bundle generated into Secret %s before digests were recorded: from now on only that bundle is used", name)
		}
	}
	next, err := bundlestore.LoadRotationCAs(ctx, r.Secrets, cluster)
	if err != nil {
		return refused(err)
	}
	keys, err := bundlestore.LoadRotationKeys(ctx, r.Secrets, cluster)
	if err != nil {
		return refused(err)
	}
	if _, err := bundlestore.BundleOf(cluster, &secret, next, keys); err != nil {
		return refused(err)
	}
	if generated {
		return cond(metav1.ConditionTrue, v1alpha1.ClusterReasonGenerated, "the bundle was generated into Secret %s, its SHA-256 recorded in status.secretsDigest", name)
	}
	return cond(metav1.ConditionTrue, v1alpha1.ClusterReasonProvided, "the bundle is read from Secret %s", name)
}

// adoptable reports whether s is the bundle a cluster generated before
// ichor-controller recorded digests: none is recorded, the cluster
// reported SecretsReady True with reason Generated (which, since digests
// are recorded, it reports only with one), and s names the cluster its
// controller, as the bundles generated then did. Its digest is recorded
// once (ensureBundle); a new cluster never adopts a Secret.
func adoptable(cluster *v1alpha1.TalosCluster, s *corev1.Secret) bool {
	if cluster.Spec.SecretsRef != nil || cluster.Status.SecretsDigest != "" {
		return false
	}
	c := meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ClusterReasonGenerated && metav1.IsControlledBy(s, cluster)
}

// generate records the digest of a new bundle, then writes the bundle
// into Secret name, controlled by cluster so that it goes when the
// cluster goes. A Secret of that name that appeared in between is refused,
// and left as it is. Stopped between the two, the next reconcile
// generates another bundle and records its digest instead.
func (r *Reconciler) generate(ctx context.Context, cluster *v1alpha1.TalosCluster, name string) error {
	data, err := secretsbundle.Generate(cluster.Spec.TalosVersion, r.Now())
	if err != nil {
		return fmt.Errorf("TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	if err := bundlestore.RecordDigest(ctx, r.Client, cluster, secretsbundle.Digest(data)); err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      name,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "ichor-controller",
				"ichor.dev/cluster":            cluster.Name,
			},
		},
		Type: secretsbundle.SecretType,
		Data: map[string][]byte{secretsbundle.BundleKey: data},
	}
	if err := controllerutil.SetControllerReference(cluster, secret, r.Scheme); err != nil {
		return fmt.Errorf("own Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	err = r.Client.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return bundlestore.DigestMismatch(cluster)
	}
	if err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", cluster.Namespace, name, err)
	}
	return nil
}

// FieldManager owns the SecretsReady condition, the one status field this
// reconciler writes.
const FieldManager = v1alpha1.FieldManagerClusterSecrets

// writeStatus applies cond, with server-side apply under FieldManager, when
// it differs from what cluster shows.
func (r *Reconciler) writeStatus(ctx context.Context, cluster *v1alpha1.TalosCluster, cond metav1.Condition) error {
	before := cluster.Status.DeepCopy()
	cond.ObservedGeneration = cluster.Generation
	cond.LastTransitionTime = metav1.NewTime(r.Now())
	meta.SetStatusCondition(&cluster.Status.Conditions, cond)
	if equality.Semantic.DeepEqual(before, &cluster.Status) {
		return nil
	}
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithStatus(ichorac.TalosClusterStatus().
		WithConditions(statusapply.Conditions(cluster.Status.Conditions, v1alpha1.OwnedConditions(cluster, FieldManager)...)...))
	if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}

// announce emits the Event of a new SecretsReady state.
func (r *Reconciler) announce(cluster *v1alpha1.TalosCluster, cond metav1.Condition) {
	if cond.Status == metav1.ConditionTrue {
		return // a generation has its own Event; a provided bundle needs none
	}
	events.Record(r.Recorder, cluster, nil, v1alpha1.EventReason(cond.Reason), "CheckSecretsBundle", "%s", cond.Message)
}
