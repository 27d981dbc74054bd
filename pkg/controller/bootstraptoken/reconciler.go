// Package bootstraptoken lets each TalosCluster's bootstrap token
// authenticate only while a kubelet may need it: while a machine of the
// cluster joins (from its approval until its Node registers) and while a
// Kubernetes CA rotation has the kubelets bootstrap again. A worker's
// config holds the token; outside those windows it gets nobody a kubelet
// certificate. The cluster's BootstrapTokenEnabled condition says which,
// under a field manager of its own.
//
// It is its own controller, beside the cluster health reconciler (package
// taloscluster): it acts in the cluster's Kubernetes on its own schedule,
// and Ready does not wait for it.
package bootstraptoken

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/predicates"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "taloscluster-bootstrap-token"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval is how often a cluster whose token authenticates (or
	// could not be set) is looked at. Default 5s.
	PollInterval time.Duration
	// ResyncInterval is how often a cluster whose token authenticates
	// nobody is looked at. Default 1m.
	ResyncInterval time.Duration
	// CallTimeout bounds the calls of one reconcile. Default 30s.
	CallTimeout time.Duration
	// CredentialTTL is the lifetime of the client certificates minted. Default 10m.
	CredentialTTL time.Duration
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.PollInterval, 5*time.Second)
	defaults.Positive(&o.ResyncInterval, time.Minute)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	return o
}

// Reconciler sets the bootstrap token's usage of TalosClusters.
type Reconciler struct {
	Client client.Client
	// Secrets reads bundle Secrets without a cache.
	Secrets  client.Reader
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Kubes keeps the clusters' Kubernetes clients between reconciles;
	// the cluster health reconciler shares it. Nil: a set of its own.
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

// SetupWithManager registers the reconciler: it wakes on a cluster's spec,
// its bootstrap and its CA rotation's phases, and on any change of a
// machine of the cluster; it polls for Nodes, which it does not watch.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, bootstrappedOrRotating()))).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueueCluster(), builder.WithPredicates(predicates.NotOnlyServingCertificateRecorded)).
		Complete(r)
}

// bootstrappedOrRotating passes a cluster that was bootstrapped, or whose
// CA rotation moved: both change whether the token may authenticate.
func bootstrappedOrRotating() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosCluster)
			return ok1 && ok2 && ((o.Status.BootstrappedAt == nil) != (n.Status.BootstrappedAt == nil) ||
				!equality.Semantic.DeepEqual(o.Status.CARotation, n.Status.CARotation))
		},
	}
}

// view is what one reconcile learned, and the condition it sets.
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

// Reconcile sets one cluster's bootstrap token as its machines need it.
// A cluster without a Kubernetes API yet (not bootstrapped, or whose API
// does not answer) is looked at again later; its health condition
// KubernetesAPIReachable says why.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() || cluster.Spec.Paused {
		return ctrl.Result{}, nil
	}
	later := ctrl.Result{RequeueAfter: r.Options.PollInterval}
	if cluster.Status.BootstrappedAt == nil || !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady) {
		return later, nil
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		return later, nil
	}
	v := &view{cluster: &cluster, now: metav1.NewTime(r.Now())}
	if v.machines, err = r.members(ctx, &cluster); err != nil {
		return ctrl.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	cs, err := r.kubes().Get(cluster.UID, cluster.Spec.ControlPlane.Endpoint, bundle.Bundle, v.now.Time, r.Options.CredentialTTL, bundle.KubernetesAccepted...)
	if err != nil {
		return later, nil
	}
	var nodes *corev1.NodeList
	err = r.withAccess(ctx, v, bundle, func() (err error) {
		nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		log.FromContext(ctx).V(1).Info("The cluster's Kubernetes API does not list its Nodes", "error", err.Error())
		return later, nil
	}
	before := cluster.Status.DeepCopy()
	r.restrictBootstrapToken(ctx, v, cs, bundle, nodes.Items)
	if err := writeStatus(ctx, r.Client, &cluster, before); err != nil {
		return ctrl.Result{}, err
	}
	if meta.IsStatusConditionFalse(cluster.Status.Conditions, v1alpha1.ClusterConditionBootstrapTokenEnabled) {
		return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
	}
	return later, nil
}

// members are the cluster's approved machines, sorted by name.
func (r *Reconciler) members(ctx context.Context, cluster *v1alpha1.TalosCluster) ([]v1alpha1.TalosMachine, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
		return nil, fmt.Errorf("list machines of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	members := slices.DeleteFunc(list.Items, func(m v1alpha1.TalosMachine) bool { return !clusterindex.Member(&m) })
	slices.SortFunc(members, func(a, b v1alpha1.TalosMachine) int { return cmp.Compare(a.Name, b.Name) })
	return members, nil
}

// withAccess calls f with workload.WithAccess, and records an Event when
// it installed the controller's access.
func (r *Reconciler) withAccess(ctx context.Context, v *view, bundle *secretsbundle.Secrets, f func() error) error {
	installed, err := workload.WithAccess(ctx, bundle.Bundle, v.cluster.Spec.ControlPlane.Endpoint, v.now.Time, bundle.KubernetesAccepted, f)
	if installed {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventControllerAccess, "InstallControllerAccess",
			"Bound the roles %s to %s in the cluster's Kubernetes", workload.ControllerRole, workload.Controller.User)
	}
	return err
}
