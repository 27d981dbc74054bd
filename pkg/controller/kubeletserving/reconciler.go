// Package kubeletserving approves the kubelet serving certificates of the
// clusters that ask for them (spec.security.kubeletServingCertificates). For
// each pending request of the kubernetes.io/kubelet-serving signer it finds
// the machine the request names, reads that node's identity over its
// authenticated Talos API, and approves exactly what matches or denies what
// does not, with the reason. What it cannot place stays pending. It never
// touches another signer and never deletes a request. It records the issued
// certificates on the machines, and says on the cluster whether every
// machine has one (KubeletServingCertificates) and, once that was so with
// verifyFromAPIServer set, latches KubeletServingVerified, which makes the
// rendered kube-apiserver verify kubelets against the cluster CA.
package kubeletserving

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/clusterindex"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/statusapply"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/kubeletserving"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// FieldManager owns the status fields this approver writes: on machines,
// status.kubeletServingCertificate; on clusters, the two KubeletServing
// conditions.
const FieldManager = "ichor-kubeletserving"

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "kubelet-serving-approver"

// Event reasons, on the machine a request is for.
const (
	EventApproved = "KubeletServingApproved"
	EventDenied   = "KubeletServingDenied"
)

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval paces a cluster with requests pending or machines
	// without a certificate. Default 3s.
	PollInterval time.Duration
	// RetryInterval paces a cluster with requests whose node's Talos API
	// did not answer or whose decision could not be written: nothing else
	// says when the node answers again. Default 3s, at most PollInterval.
	RetryInterval time.Duration
	// ResyncInterval paces a cluster where every machine has its certificate. Default 1m.
	ResyncInterval time.Duration
	// CallTimeout bounds the calls of one reconcile. Default 30s.
	CallTimeout time.Duration
	// IdentityTimeout bounds reading one node's identity, so that a node
	// that does not answer holds up only its own requests. Default 5s.
	IdentityTimeout time.Duration
	// Parallelism is how many nodes' requests are decided at once. Default 16.
	Parallelism int
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.PollInterval, 3*time.Second)
	def(&o.RetryInterval, 3*time.Second)
	o.RetryInterval = min(o.RetryInterval, o.PollInterval)
	def(&o.ResyncInterval, time.Minute)
	def(&o.CallTimeout, 30*time.Second)
	def(&o.IdentityTimeout, 5*time.Second)
	if o.Parallelism <= 0 {
		o.Parallelism = 16
	}
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

	watches *csrWatches
}

// SetupWithManager registers the reconciler. It wakes on a cluster's spec,
// on its machines, on kubelet serving requests in the cluster's Kubernetes
// (a watch per enabled cluster), and on its own timer while requests may be
// pending.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	r.watches = newCSRWatches()
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.watches.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WatchesRawSource(source.Channel(r.watches.events, &handler.EnqueueRequestForObject{})).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueueCluster()).
		Complete(r)
}

// Reconcile decides one cluster's pending requests and updates its conditions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		r.watches.stop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	opt := cluster.Spec.Security.KubeletServingCertificates
	before := cluster.Status.DeepCopy()
	if !opt.Enabled {
		r.watches.stop(req.NamespacedName)
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
	bundle, err := clustersecrets.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonKubernetesUnreachable, "%v", err)
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, r.writeClusterStatus(ctx, &cluster, before)
	}
	if err := r.watches.ensure(ctx, &cluster, bundle.Bundle, bundle.KubernetesAccepted, now.Time); err != nil {
		log.FromContext(ctx).Error(err, "Watch kubelet serving requests; the timer stands in")
	}
	cfg, err := workload.ClientConfig(bundle.Bundle, cluster.Spec.ControlPlane.Endpoint, workload.Controller, now.Time, 2*r.Options.CallTimeout,
		bundle.KubernetesAccepted...)
	if err != nil {
		return ctrl.Result{}, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ctrl.Result{}, err
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", kubeletserving.Signer).String(),
	})
	if err != nil {
		set(v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionFalse, v1alpha1.ClusterReasonKubernetesUnreachable, "list kubelet serving requests: %v", err)
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, r.writeClusterStatus(ctx, &cluster, before)
	}
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Reader), now.Time, 2*r.Options.CallTimeout)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := &decider{r: r, cs: cs, creds: creds, machines: machines}
	pending, retry := d.decideAll(ctx, csrs.Items)
	if err := r.recordIssued(ctx, machines, csrs.Items); err != nil {
		return ctrl.Result{}, err
	}

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
	if retry > 0 {
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}, nil
	}
	if pending > 0 || len(waiting) > 0 {
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.ResyncInterval}, nil
}

// machines are the cluster's approved machines that are not being deleted, by name.
func (r *Reconciler) machines(ctx context.Context, cluster *v1alpha1.TalosCluster) ([]v1alpha1.TalosMachine, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
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
		WithConditions(statusapply.Conditions(cluster.Status.Conditions,
			v1alpha1.ClusterConditionKubeletServingCertificates, v1alpha1.ClusterConditionKubeletServingVerified)...))
	if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}

// decider decides the requests of one cluster in one reconcile.
type decider struct {
	r        *Reconciler
	cs       kubernetes.Interface
	creds    talos.Credentials
	machines []v1alpha1.TalosMachine
}

// machineFor is the machine whose node name (or hostname) is node.
func (d *decider) machineFor(node string) *v1alpha1.TalosMachine {
	for i := range d.machines {
		m := &d.machines[i]
		if m.Status.NodeName == node || (m.Status.NodeName == "" && m.Spec.Hostname == node) {
			return m
		}
	}
	return nil
}

// decideAll decides every undecided request it can place and returns how
// many stay pending, and how many of those are to be tried again soon (see
// decideFor). Machines are worked on in parallel (Options.Parallelism),
// each machine's requests in order with one identity read.
func (d *decider) decideAll(ctx context.Context, csrs []certv1.CertificateSigningRequest) (pending, retry int) {
	logger := log.FromContext(ctx)
	var others, retries atomic.Int64
	byMachine := map[*v1alpha1.TalosMachine][]*certv1.CertificateSigningRequest{}
	for i := range csrs {
		csr := &csrs[i]
		if csr.Spec.SignerName != kubeletserving.Signer || decided(csr) {
			continue
		}
		node, ok := kubeletserving.NodeName(csr)
		if !ok {
			// Unreadable or naming no node: no machine to place it on, so it is
			// not Ichor's to decide.
			others.Add(1)
			continue
		}
		m := d.machineFor(node)
		if m == nil {
			logger.V(1).Info("Kubelet serving request for a node of no machine; left pending", "csr", csr.Name, "node", node)
			others.Add(1)
			continue
		}
		byMachine[m] = append(byMachine[m], csr)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, d.r.Options.Parallelism)
	for m, reqs := range byMachine {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			retries.Add(int64(d.decideFor(ctx, m, reqs)))
		})
	}
	wg.Wait()
	retry = int(retries.Load())
	return int(others.Load()) + retry, retry
}

// decideFor decides the requests naming machine m; it returns how many stay
// pending, to be tried again: its node did not answer, or the decision
// could not be written.
func (d *decider) decideFor(ctx context.Context, m *v1alpha1.TalosMachine, reqs []*certv1.CertificateSigningRequest) int {
	logger := log.FromContext(ctx).WithValues("machine", m.Name)
	id, err := d.identity(ctx, m)
	if err != nil {
		logger.Info("Cannot read the node's identity; its requests stay pending", "requests", len(reqs), "error", err.Error())
		return len(reqs)
	}
	pending := 0
	for _, csr := range reqs {
		node, _ := kubeletserving.NodeName(csr)
		decision := kubeletserving.Decide(csr, node, id)
		if err := d.record(ctx, csr, decision); err != nil {
			logger.Error(err, "Record the decision on a kubelet serving request", "csr", csr.Name)
			pending++
			continue
		}
		if decision.Approve {
			d.r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, EventApproved, "ApproveKubeletServing",
				"Approved kubelet serving request %s for node %s", csr.Name, node)
		} else {
			d.r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, EventDenied, "DenyKubeletServing",
				"Denied kubelet serving request %s for node %s: %s (%s)", csr.Name, node, decision.Message, decision.Reason)
		}
		logger.Info("Decided kubelet serving request", "csr", csr.Name, "node", node, "approved", decision.Approve, "reason", decision.Reason)
	}
	return pending
}

// identity reads the node's identity over its Talos API, as os:reader.
func (d *decider) identity(ctx context.Context, m *v1alpha1.TalosMachine) (*talos.Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, d.r.Options.IdentityTimeout)
	defer cancel()
	node, err := d.r.Dialer.Configured(ctx, m.Spec.Address, d.creds)
	if err != nil {
		return nil, err
	}
	defer func() { _ = node.Close() }()
	return node.Identity(ctx)
}

// record writes the decision into the request's approval.
func (d *decider) record(ctx context.Context, csr *certv1.CertificateSigningRequest, decision kubeletserving.Decision) error {
	cond := certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
		Reason: decision.Reason, Message: decision.Message, LastUpdateTime: metav1.NewTime(d.r.Now()),
	}
	if decision.Approve {
		cond.Type = certv1.CertificateApproved
	}
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	_, err := d.cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	return err
}

// decided is true for a request that was approved or denied (by anyone).
func decided(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if (c.Type == certv1.CertificateApproved || c.Type == certv1.CertificateDenied) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// recordIssued records on each machine the newest certificate issued for
// its node. Each request is read once; machines are updated in parallel.
func (r *Reconciler) recordIssued(ctx context.Context, machines []v1alpha1.TalosMachine, csrs []certv1.CertificateSigningRequest) error {
	newest := map[string]*v1alpha1.KubeletServingCertificateStatus{}
	for i := range csrs {
		csr := &csrs[i]
		if len(csr.Status.Certificate) == 0 {
			continue
		}
		node, ok := kubeletserving.NodeName(csr)
		block, _ := pem.Decode(csr.Status.Certificate)
		if !ok || block == nil {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		issued, notAfter := metav1.NewTime(cert.NotBefore), metav1.NewTime(cert.NotAfter)
		if cur := newest[node]; cur == nil || cur.NotAfter.Before(&notAfter) {
			newest[node] = &v1alpha1.KubeletServingCertificateStatus{Request: csr.Name, IssuedAt: &issued, NotAfter: &notAfter}
		}
	}
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
