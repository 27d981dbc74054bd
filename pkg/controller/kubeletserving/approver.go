package kubeletserving

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/kubeletserving"
	"ichor.dev/ichor/pkg/talos"
)

// approver decides one cluster's kubelet serving requests as they arrive.
// An informer on the cluster's requests of the signer feeds a queue of
// request names, and Options.Parallelism workers decide each request on
// its own, reading its node's identity over the node's Talos API at that
// moment, through a session kept open with each machine (sessions.go): no
// request waits for another request, another node or the cluster's
// reconcile. The reconcile keeps the approver's view of the
// cluster (its machines, its Talos credentials) current, and records what
// was issued.
type approver struct {
	r   *Reconciler
	key types.NamespacedName
	// endpoint and cas are what its Kubernetes client was built for; a
	// change of either (a CA rotation's phase) replaces the approver.
	endpoint, cas string
	renewAt       time.Time
	cancel        context.CancelFunc

	cs       kubernetes.Interface
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	sessions *sessions
	// deciding counts the requests being decided now.
	deciding atomic.Int32
	// lastBusy is when (Unix nanoseconds, by the reconciler's clock) a
	// request last arrived undecided or a decision last ended.
	lastBusy atomic.Int64

	mu sync.Mutex
	// machines are the cluster's machines by the node name their kubelet
	// registers with (status.nodeName, or spec.hostname until it is known).
	machines map[string]*machineRef
	// unplaced are requests left pending for a node of no machine, by name,
	// with that node name: a new machine may place them.
	unplaced map[string]string
	// issued are the newest certificates issued for each node name, and
	// parsed the names of the requests they were read from: each issued
	// certificate is parsed once, as the informer delivers it.
	issued  map[string]*v1alpha1.KubeletServingCertificateStatus
	parsed  map[string]bool
	credsCA string
	// credsRenewAt is when creds are half-way through their lifetime.
	credsRenewAt time.Time
	listErr      error
	// deferredSince is when the reconcile's records were first put off
	// for requests waiting; zero when they are not.
	deferredSince time.Time
}

// machineRef is what deciding a request needs of its machine.
type machineRef struct {
	name, namespace, address string
	uid                      types.UID
}

// object is the machine as an Event's subject.
func (m *machineRef) object() *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.namespace, UID: m.uid}}
}

// outcome is what became of one attempt at a request.
type outcome int

const (
	// settled: decided, or not Ichor's to decide; nothing to retry.
	settled outcome = iota
	// retry: its node's Talos API did not answer, or the decision could not
	// be written; the queue tries again after a backoff.
	retry
)

// startApprover starts deciding the requests of cluster key through cs; it
// wakes the cluster's reconcile on wake when a request arrives or is
// issued.
func startApprover(r *Reconciler, key types.NamespacedName, cs kubernetes.Interface, wake func()) (*approver, error) {
	a := &approver{
		r: r, key: key, cs: cs,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, r.Options.RetryInterval),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ControllerName + "-" + key.Namespace + "-" + key.Name}),
		machines: map[string]*machineRef{},
		unplaced: map[string]string{},
		issued:   map[string]*v1alpha1.KubeletServingCertificateStatus{},
		parsed:   map[string]bool{},
		sessions: newSessions(r.Dialer, r.Options.IdentityTimeout),
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, r.Options.ResyncInterval, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", kubeletserving.Signer).String()
	}))
	a.informer = factory.Certificates().V1().CertificateSigningRequests().Informer()
	if err := a.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		a.mu.Lock()
		a.listErr = err
		a.mu.Unlock()
	}); err != nil {
		return nil, err
	}
	enqueue := func(obj any) {
		csr, ok := obj.(*certv1.CertificateSigningRequest)
		if !ok {
			return
		}
		if !decided(csr) {
			a.busy()
			a.queue.Add(csr.Name)
		}
		a.noteIssued(csr)
		// The reconcile records issued certificates and says whether every
		// machine has one.
		wake()
	}
	if _, err := a.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
				a.mu.Lock()
				delete(a.parsed, csr.Name)
				delete(a.unplaced, csr.Name)
				a.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	// It outlives the reconcile that started it: it runs until stopped or
	// renewed.
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), r.logger.WithValues("cluster", key)))
	a.cancel = func() {
		cancel()
		a.queue.ShutDown()
	}
	factory.Start(ctx.Done())
	go a.sessions.run(ctx)
	for range r.Options.Parallelism {
		go func() {
			for a.next(ctx) {
			}
		}()
	}
	return a, nil
}

func (a *approver) stop() { a.cancel() }

// synced reports whether the informer holds the cluster's requests, and the
// last error listing or watching them.
func (a *approver) synced() (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.informer.HasSynced(), a.listErr
}

// busy notes that a request arrived or a decision ended now.
func (a *approver) busy() { a.lastBusy.Store(a.r.Now().UnixNano()) }

// recordDue reports whether the reconcile may record issued certificates
// and conditions now: no request waits for a worker or is being decided
// and none arrived or was decided for recordDelay (a burst's requests come
// over seconds, and the approver keeps up with them, so an idle instant is
// no sign the burst is over), or the records have waited maxRecordDelay
// already.
func (a *approver) recordDue(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	quiet := now.Sub(time.Unix(0, a.lastBusy.Load())) >= recordDelay
	idle := quiet && a.queue.Len() == 0 && a.deciding.Load() == 0
	if idle || (!a.deferredSince.IsZero() && now.Sub(a.deferredSince) >= maxRecordDelay) {
		a.deferredSince = time.Time{}
		return true
	}
	if a.deferredSince.IsZero() {
		a.deferredSince = now
	}
	return false
}

// undecided counts the requests neither approved nor denied.
func (a *approver) undecided() int {
	n := 0
	for _, obj := range a.informer.GetStore().List() {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok && !decided(csr) {
			n++
		}
	}
	return n
}

// noteIssued keeps the certificate issued for csr, if it carries one not
// parsed yet and it is its node's newest.
func (a *approver) noteIssued(csr *certv1.CertificateSigningRequest) {
	if len(csr.Status.Certificate) == 0 {
		return
	}
	a.mu.Lock()
	seen := a.parsed[csr.Name]
	a.mu.Unlock()
	if seen {
		return
	}
	node, ok := kubeletserving.NodeName(csr)
	block, _ := pem.Decode(csr.Status.Certificate)
	if !ok || block == nil {
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return
	}
	issued, notAfter := metav1.NewTime(cert.NotBefore), metav1.NewTime(cert.NotAfter)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.parsed[csr.Name] = true
	if cur := a.issued[node]; cur == nil || cur.NotAfter.Before(&notAfter) {
		a.issued[node] = &v1alpha1.KubeletServingCertificateStatus{Request: csr.Name, IssuedAt: &issued, NotAfter: &notAfter}
	}
}

// issuedCertificates are the newest certificates issued, by node name.
func (a *approver) issuedCertificates() map[string]*v1alpha1.KubeletServingCertificateStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.issued)
}

// setMachines replaces the approver's view of the cluster's machines, and
// queues the requests it could not place before that now name one.
func (a *approver) setMachines(machines []v1alpha1.TalosMachine) {
	byNode := make(map[string]*machineRef, len(machines))
	ref := func(m *v1alpha1.TalosMachine) *machineRef {
		return &machineRef{name: m.Name, namespace: m.Namespace, address: m.Spec.Address, uid: m.UID}
	}
	for i := range machines {
		if m := &machines[i]; m.Status.NodeName != "" {
			byNode[m.Status.NodeName] = ref(m)
		}
	}
	for i := range machines {
		if m := &machines[i]; m.Status.NodeName == "" && m.Spec.Hostname != "" {
			if _, taken := byNode[m.Spec.Hostname]; !taken {
				byNode[m.Spec.Hostname] = ref(m)
			}
		}
	}
	addresses := make([]string, 0, len(machines))
	for i := range machines {
		addresses = append(addresses, machines[i].Spec.Address)
	}
	a.sessions.setAddresses(addresses)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.machines = byNode
	for name, node := range a.unplaced {
		if byNode[node] != nil {
			delete(a.unplaced, name)
			a.queue.Add(name)
		}
	}
}

// setCredentials hands the approver the Talos credentials of the cluster
// (trusting talosCA) when it has none for that CA or they are half-way
// through their lifetime; mint makes new ones.
func (a *approver) setCredentials(talosCA []byte, now time.Time, mint func() (talos.Credentials, error)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.credsCA == string(talosCA) && now.Before(a.credsRenewAt) {
		return nil
	}
	creds, err := mint()
	if err != nil {
		return err
	}
	a.credsCA, a.credsRenewAt = string(talosCA), now.Add(credentialTTL/2)
	a.sessions.setCredentials(creds)
	return nil
}

// next takes one request off the queue and decides it; false once the
// approver is stopped.
func (a *approver) next(ctx context.Context) bool {
	name, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(name)
	a.deciding.Add(1)
	defer func() {
		a.busy()
		a.deciding.Add(-1)
	}()
	if a.decide(ctx, name) == retry {
		a.queue.AddRateLimited(name)
	} else {
		a.queue.Forget(name)
	}
	return true
}

// decide decides request name, if it is still undecided and names a node
// of one of the cluster's machines.
func (a *approver) decide(ctx context.Context, name string) outcome {
	logger := log.FromContext(ctx).WithValues("csr", name)
	obj, exists, err := a.informer.GetStore().GetByKey(name)
	if err != nil || !exists {
		return settled
	}
	csr, ok := obj.(*certv1.CertificateSigningRequest)
	if !ok || csr.Spec.SignerName != kubeletserving.Signer || decided(csr) {
		return settled
	}
	node, ok := kubeletserving.NodeName(csr)
	if !ok {
		// Unreadable or naming no node: no machine to place it on, so it is
		// not Ichor's to decide.
		return settled
	}
	a.mu.Lock()
	m := a.machines[node]
	if m == nil {
		a.unplaced[name] = node
	}
	a.mu.Unlock()
	if m == nil {
		logger.V(1).Info("Kubelet serving request for a node of no machine; left pending", "node", node)
		return settled
	}
	logger = logger.WithValues("machine", m.name, "node", node)
	id, err := a.sessions.identity(ctx, m.address)
	if errors.Is(err, errNoCredentials) {
		return retry
	}
	if err != nil {
		logger.Info("Cannot read the node's identity; its request stays pending", "error", err.Error())
		return retry
	}
	decision := kubeletserving.Decide(csr, node, id)
	if err := a.record(ctx, csr, decision); err != nil {
		logger.Error(err, "Record the decision on a kubelet serving request")
		return retry
	}
	// A denial needs someone's attention, so it is an Event; an approval is
	// recorded on the request itself (its Approved condition names the
	// node) and on the machine, and an Event each would be a write to the
	// management cluster per node when every kubelet asks at once.
	if !decision.Approve {
		events.Record(a.r.Recorder, m.object(), nil, v1alpha1.EventKubeletServingDenied, "DenyKubeletServing",
			"Denied kubelet serving request %s for node %s: %s (%s)", csr.Name, node, decision.Message, decision.Reason)
	}
	logger.Info("Decided kubelet serving request", "approved", decision.Approve, "reason", decision.Reason)
	return settled
}

// record writes the decision into the request's approval.
func (a *approver) record(ctx context.Context, csr *certv1.CertificateSigningRequest, decision kubeletserving.Decision) error {
	ctx, cancel := context.WithTimeout(ctx, a.r.Options.CallTimeout)
	defer cancel()
	cond := certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
		Reason: decision.Reason, Message: decision.Message, LastUpdateTime: metav1.NewTime(a.r.Now()),
	}
	if decision.Approve {
		cond.Type = certv1.CertificateApproved
	}
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	_, err := a.cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
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
