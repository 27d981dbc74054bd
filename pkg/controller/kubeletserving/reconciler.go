// Package kubeletserving approves the kubelet serving certificates of the
// clusters that ask for them (spec.security.kubeletServingCertificates). For
// each request of the kubernetes.io/kubelet-serving signer it finds the
// machine the request names, reads that node's identity over its
// authenticated Talos API, and approves exactly what matches or denies what
// does not, with the reason. What it cannot place stays pending. It never
// touches another signer and never deletes a request.
//
// Each request is decided as its watch event arrives, on its own (an
// approver per cluster, approver.go); the reconcile, one cluster at a time,
// keeps the approver's view of the cluster current, records the issued
// certificates on the machines, and says on the cluster whether every
// machine has one (KubeletServingCertificates) and, once that was so with
// verifyFromAPIServer set, latches KubeletServingVerified, which makes the
// rendered kube-apiserver verify kubelets against the cluster CA.
package kubeletserving

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/predicates"
	"ichor.dev/ichor/pkg/statusapply"
	"ichor.dev/ichor/pkg/talos"
)

// FieldManager owns the status fields this approver writes: on machines,
// status.kubeletServingCertificate; on clusters, the two KubeletServing
// conditions.
const FieldManager = v1alpha1.FieldManagerKubeletServing

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "kubelet-serving-approver"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval paces a cluster with requests pending or machines
	// without a certificate. Default 3s.
	PollInterval time.Duration
	// RetryInterval is the longest backoff before a request whose node's
	// Talos API did not answer, or whose decision could not be written, is
	// tried again. Default 3s, at most PollInterval.
	RetryInterval time.Duration
	// ResyncInterval paces a cluster where every machine has its
	// certificate, and how often every request is looked at again. Default 1m.
	ResyncInterval time.Duration
	// CallTimeout bounds the calls of one reconcile, and writing one
	// decision. Default 30s.
	CallTimeout time.Duration
	// IdentityTimeout bounds reading one node's identity, so that a node
	// that does not answer holds up only its own requests. Default 5s.
	IdentityTimeout time.Duration
	// Parallelism is how many requests of a cluster are decided at once
	// (a decision mostly waits: on the node's Talos API, then on
	// kube-apiserver), and how many machines' records are written at once.
	// Default 64.
	Parallelism int
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.PollInterval, 3*time.Second)
	defaults.Positive(&o.RetryInterval, 3*time.Second)
	o.RetryInterval = min(o.RetryInterval, o.PollInterval)
	defaults.Positive(&o.ResyncInterval, time.Minute)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.IdentityTimeout, 5*time.Second)
	defaults.Positive(&o.Parallelism, 64)
	return o
}

// Reconciler approves kubelet serving certificates, one TalosCluster at a time.
type Reconciler struct {
	Client   client.Client
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	approvers *approvers
	// logger is what approvers log with, outside any reconcile.
	logger logr.Logger
}

// SetupWithManager registers the reconciler. It wakes on a cluster's spec,
// on its machines, on the cluster's approver (a request arrived or was
// issued), and on its own timer while requests may be pending.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	r.approvers = newApprovers()
	r.logger = mgr.GetLogger().WithValues("controller", ControllerName)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.approvers.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.approvers.queue.Store(&q)
			return nil
		})).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueueCluster(), builder.WithPredicates(predicates.NotOnlyServingCertificateRecorded)).
		Complete(r)
}

// Reconcile keeps one cluster's approver current, records what was issued
// and updates the cluster's conditions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.approvers.stop(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		r.approvers.stop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	opt := cluster.Spec.Security.KubeletServingCertificates
	before := cluster.Status.DeepCopy()
	if !opt.Enabled {
		r.approvers.stop(req.NamespacedName)
		meta.RemoveStatusCondition(&cluster.Status.Conditions, v1alpha1.ClusterConditionKubeletServingCertificates)
		meta.RemoveStatusCondition(&cluster.Status.Conditions, v1alpha1.ClusterConditionKubeletServingVerified)
		return ctrl.Result{}, r.writeClusterStatus(ctx, &cluster, before)
	}
	now := metav1.NewTime(r.Now())
	set := func(condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
		meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
			ObservedGeneration: cluster.Generation, LastTransitionTime: now,
		})
	}
	if !opt.VerifyFromAPIServer {
		meta.RemoveStatusCondition(&cluster.Status.Conditions, v1alpha1.ClusterConditionKubeletServingVerified)
	}

	if a := r.approvers.get(req.NamespacedName); a != nil && !a.recordDue(now.Time) {
		// Requests are being decided: what follows (reading the machines and
		// the bundle, recording, the conditions) is bookkeeping, and waits
		// for them, at most maxRecordDelay, rather than compete with them.
		return ctrl.Result{RequeueAfter: recordDelay}, nil
	}

	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	machines, err := r.machines(ctx, &cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cluster.Status.BootstrappedAt == nil {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonNotBootstrapped, "the cluster is not bootstrapped yet")
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, r.writeClusterStatus(ctx, &cluster, before)
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonKubernetesUnreachable, "%v", err)
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, r.writeClusterStatus(ctx, &cluster, before)
	}
	a, err := r.approvers.ensure(ctx, r, &cluster, bundle.Bundle, bundle.KubernetesAccepted, now.Time)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := a.setCredentials(bundle.TalosCA(), now.Time, func() (talos.Credentials, error) {
		return bundle.TalosCredentials(role.MakeSet(role.Reader), now.Time, credentialTTL)
	}); err != nil {
		return ctrl.Result{}, err
	}
	a.setMachines(machines)
	synced, listErr := a.synced()
	if !synced {
		if listErr != nil {
			set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonKubernetesUnreachable,
				"list kubelet serving requests: %v", listErr)
		}
		// Its first list wakes this reconcile again.
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}, r.writeClusterStatus(ctx, &cluster, before)
	}
	if err := r.recordIssued(ctx, machines, a.issuedCertificates()); err != nil {
		return ctrl.Result{}, err
	}
	pending := a.undecided()

	waiting := withoutCertificate(machines, now.Time)
	if len(waiting) == 0 && len(machines) > 0 {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued, "every machine has an unexpired kubelet serving certificate")
		if opt.VerifyFromAPIServer {
			set(v1alpha1.ClusterConditionKubeletServingVerified, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued,
				"every machine had a certificate; kube-apiserver verifies kubelets against the cluster CA from now on")
		}
	} else {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonWaitingForCertificates, "waiting for the certificates of %s", strings.Join(waiting, ", "))
	}
	if err := r.writeClusterStatus(ctx, &cluster, before); err != nil {
		return ctrl.Result{}, err
	}
	if pending > 0 || len(waiting) > 0 {
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
}

// machines are the cluster's approved machines that are not being deleted,
// by name. They are shallow copies of the cache's objects (the reconcile
// runs about once a second while requests come in, and a deep copy of
// every machine each time was most of its garbage): the reconcile sets
// their fields, never what those point to.
func (r *Reconciler) machines(ctx context.Context, cluster *v1alpha1.TalosCluster) ([]v1alpha1.TalosMachine, error) {
	var list v1alpha1.TalosMachineList
	opts := append(clusterindex.InCluster(cluster.Namespace, cluster.Name), client.UnsafeDisableDeepCopy)
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("list machines of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	out := slices.DeleteFunc(list.Items, func(m v1alpha1.TalosMachine) bool { return !clusterindex.Member(&m) })
	slices.SortFunc(out, func(a, b v1alpha1.TalosMachine) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// writeClusterStatus applies the approver's two conditions on cluster, with
// server-side apply under FieldManager, when they changed; a condition
// removed from cluster is removed from the object with it.
func (r *Reconciler) writeClusterStatus(ctx context.Context, cluster *v1alpha1.TalosCluster, before *v1alpha1.TalosClusterStatus) error {
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

// recordIssued records on each machine the newest certificate issued for
// its node (newest, by node name); machines are updated in parallel.
func (r *Reconciler) recordIssued(ctx context.Context, machines []v1alpha1.TalosMachine, newest map[string]*v1alpha1.KubeletServingCertificateStatus) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		slots = make(chan struct{}, r.Options.Parallelism)
	)
	for i := range machines {
		m := &machines[i]
		rec := newest[m.Status.NodeName]
		if m.Status.NodeName == "" || rec == nil || equality.Semantic.DeepEqual(rec, m.Status.KubeletServingCertificate) {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			// Server-side apply of the one field this approver owns.
			cert := ichorac.KubeletServingCertificateStatus().WithRequest(rec.Request)
			if rec.IssuedAt != nil {
				cert.WithIssuedAt(*rec.IssuedAt)
			}
			if rec.NotAfter != nil {
				cert.WithNotAfter(*rec.NotAfter)
			}
			err := r.Client.Status().Apply(ctx,
				ichorac.TalosMachine(m.Name, m.Namespace).WithStatus(ichorac.TalosMachineStatus().WithKubeletServingCertificate(cert)),
				client.FieldOwner(FieldManager), client.ForceOwnership)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("record the kubelet serving certificate of TalosMachine %s/%s: %w", m.Namespace, m.Name, err))
				return
			}
			m.Status.KubeletServingCertificate = rec
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// withoutCertificate names the machines with no unexpired certificate recorded.
func withoutCertificate(machines []v1alpha1.TalosMachine, now time.Time) []string {
	var names []string
	for _, m := range machines {
		c := m.Status.KubeletServingCertificate
		if c == nil || c.NotAfter == nil || !c.NotAfter.Time.After(now) {
			names = append(names, m.Name)
		}
	}
	return names
}
