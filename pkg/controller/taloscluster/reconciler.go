// Package taloscluster follows each TalosCluster as a whole: it counts its
// machines, bootstraps etcd on the first control plane exactly once
// (bootstrap.go), follows etcd membership (etcd.go), reaches the cluster's
// Kubernetes API with ichor-controller's own least-privilege identity,
// installing that identity's role on first contact (kubernetes.go), and
// sums it up in conditions, phase and Events (summary.go). Bootstrap and
// health are one reconcile: the bootstrap gates the checks, and
// Bootstrapped is part of Ready. The cluster's bootstrap token is package
// bootstraptoken's.
package taloscluster

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/predicates"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "taloscluster-health"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval is how often a cluster that is not Ready is looked at. Default 5s.
	PollInterval time.Duration
	// HealthInterval is how often a Ready cluster is checked. Default 1m.
	HealthInterval time.Duration
	// CallTimeout bounds the calls of one reconcile. Default 30s.
	CallTimeout time.Duration
	// CredentialTTL is the lifetime of the certificates minted per reconcile. Default 10m.
	CredentialTTL time.Duration
	// InstallImage is ichor-controller's --install-image, the installer
	// without an image factory; machineconfig renders with the same.
	InstallImage string
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.PollInterval, 5*time.Second)
	defaults.Positive(&o.HealthInterval, time.Minute)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	return o
}

// Reconciler follows TalosClusters.
type Reconciler struct {
	Client   client.Client
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// Kubes keeps the clusters' Kubernetes clients between reconciles;
	// the bootstrap token reconciler shares it. Nil: a set of its own.
	Kubes *workload.Clients

	own workload.Clients
}

// kubes is Kubes, or the reconciler's own set.
func (r *Reconciler) kubes() *workload.Clients {
	if r.Kubes != nil {
		return r.Kubes
	}
	return &r.own
}

// SetupWithManager registers the reconciler: it wakes on a cluster's spec
// and on any change of a machine of the cluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueueCluster(), builder.WithPredicates(predicates.NotOnlyServingCertificateRecorded)).
		// The image factory decides every cluster's installer.
		Watches(&v1alpha1.IchorInstallation{}, handler.EnqueueRequestsFromMapFunc(r.everyCluster),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// everyCluster enqueues every TalosCluster.
func (r *Reconciler) everyCluster(ctx context.Context, _ client.Object) []ctrl.Request {
	var list v1alpha1.TalosClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "list TalosClusters for a change of the installation's settings")
		return nil
	}
	out := make([]ctrl.Request, len(list.Items))
	for i := range list.Items {
		out[i] = ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

// view is what one reconcile learned, and the status it writes.
type view struct {
	cluster  *v1alpha1.TalosCluster
	machines []v1alpha1.TalosMachine // approved, of this cluster, sorted by name
	now      metav1.Time
}

func (v *view) set(condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&v.cluster.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
		ObservedGeneration: v.cluster.Generation, LastTransitionTime: v.now,
	})
}

func (v *view) controlPlanes() []v1alpha1.TalosMachine {
	var cps []v1alpha1.TalosMachine
	for _, m := range v.machines {
		if render.MachineRole(&m) == v1alpha1.MachineRoleControlPlane {
			cps = append(cps, m)
		}
	}
	return cps
}

// Reconcile looks at one cluster and records what it found.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() || cluster.Spec.Paused {
		return ctrl.Result{}, nil
	}
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, fmt.Errorf("list machines of TalosCluster %s: %w", req, err)
	}
	before := cluster.Status.DeepCopy()
	v := &view{cluster: &cluster, now: metav1.NewTime(r.Now())}
	v.machines = countMachines(&cluster, list.Items)

	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	r.observe(ctx, v)
	if err := r.resolveImage(ctx, v); err != nil {
		return ctrl.Result{}, err
	}
	contractCurrent(v)

	r.summarize(v)
	if cluster.Status.ObservedGeneration != cluster.Generation || !equality.Semantic.DeepEqual(before, &cluster.Status) {
		cluster.Status.ObservedGeneration = cluster.Generation
		if err := WriteStatus(ctx, r.Client, &cluster); err != nil {
			return ctrl.Result{}, err
		}
		r.announce(before, &cluster)
	}
	if cluster.Status.Phase == v1alpha1.ClusterPhaseReady {
		return ctrl.Result{RequeueAfter: r.Options.HealthInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// observe bootstraps when it is time and checks etcd and the Kubernetes API.
func (r *Reconciler) observe(ctx context.Context, v *view) {
	cluster := v.cluster
	// Bootstrapped says the cluster was bootstrapped once: a bundle that
	// is not ready later (SecretsReady says so, and the cluster is not
	// Ready) takes nothing back, and no bootstrap runs again.
	if at := cluster.Status.BootstrappedAt; at != nil && !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionBootstrapped) {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionTrue, v1alpha1.ClusterReasonBootstrapped, "bootstrapped at %s", at.UTC().Format(time.RFC3339))
	}
	secretsNotReady := func(format string, args ...any) {
		if cluster.Status.BootstrappedAt == nil {
			v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsNotReady, format, args...)
		}
	}
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady) {
		secretsNotReady("the secrets bundle is not ready")
		return
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		secretsNotReady("%v", err)
		return
	}
	// Public: the certificate kubeconfigs of the cluster trust.
	cluster.Status.KubernetesCA = string(bundle.KubernetesCA())
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), v.now.Time, r.Options.CredentialTTL)
	if err != nil {
		secretsNotReady("%v", err)
		return
	}
	if cluster.Status.BootstrappedAt == nil && !r.bootstrap(ctx, v, creds) {
		return
	}
	r.checkEtcd(ctx, v, creds)
	r.checkKubernetes(ctx, v, bundle)
}
