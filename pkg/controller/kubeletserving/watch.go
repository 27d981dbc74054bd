package kubeletserving

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/workload"
)

// watchTTL is the lifetime of the client certificate an approver's
// Kubernetes client uses; the approver is replaced with a fresh one before
// it runs out.
const watchTTL = time.Hour

// credentialTTL is the lifetime of the os:reader certificate an approver
// reads nodes' identities with; it is renewed half-way.
const credentialTTL = 10 * time.Minute

// recordDelay is how long an approver's events wait to wake the cluster's
// reconcile, which takes every event of that time at once: what it does
// (record issued certificates, set the conditions) is on no request's
// path, and a burst of requests need not run it once each.
const recordDelay = time.Second

// maxRecordDelay is the longest the reconcile's records wait while requests
// wait for the approver's workers (a burst of requests).
const maxRecordDelay = 10 * time.Second

// approvers are the running approvers, one per enabled cluster.
type approvers struct {
	// queue is the reconciler's own work queue, once the controller started:
	// an approver wakes its cluster's reconcile through it.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]

	mu      sync.Mutex
	running map[types.NamespacedName]*approver
}

func newApprovers() *approvers {
	return &approvers{running: map[types.NamespacedName]*approver{}}
}

// wake queues the reconcile of cluster key, recordDelay from now unless it
// is queued earlier already.
func (w *approvers) wake(key types.NamespacedName) {
	if q := w.queue.Load(); q != nil {
		(*q).AddAfter(reconcile.Request{NamespacedName: key}, recordDelay)
	}
}

// ensure returns the approver of cluster at its current endpoint, with a
// Kubernetes client of the bundle's CA trusting accepted too, starting one
// (and stopping an outdated one) when needed.
func (w *approvers) ensure(ctx context.Context, r *Reconciler, cluster *v1alpha1.TalosCluster, bundle *secrets.Bundle, accepted [][]byte, now time.Time) (*approver, error) {
	key := types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Name}
	endpoint := cluster.Spec.ControlPlane.Endpoint
	cas := string(bytes.Join(append([][]byte{bundle.Certs.K8s.Crt}, accepted...), nil))
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.running[key]; ok {
		if cur.endpoint == endpoint && cur.cas == cas && now.Before(cur.renewAt) {
			return cur, nil
		}
		cur.stop()
		delete(w.running, key)
	}
	cfg, err := workload.ClientConfig(bundle, endpoint, workload.Controller, now, watchTTL, accepted...)
	if err != nil {
		return nil, err
	}
	// Its decisions are its writes: client-go's default 5 QPS would make a
	// burst of requests wait on the client rather than on kube-apiserver.
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a, err := startApprover(r, key, cs, func() { w.wake(key) })
	if err != nil {
		return nil, err
	}
	a.endpoint, a.cas, a.renewAt = endpoint, cas, now.Add(watchTTL*3/4)
	w.running[key] = a
	log.FromContext(ctx).V(1).Info("Deciding kubelet serving requests", "endpoint", endpoint)
	return a, nil
}

// get is cluster key's running approver, or nil.
func (w *approvers) get(key types.NamespacedName) *approver {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running[key]
}

// stop ends cluster key's approver, if any.
func (w *approvers) stop(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.running[key]; ok {
		cur.stop()
		delete(w.running, key)
	}
}

// stopAll ends every approver, when the manager stops.
func (w *approvers) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, cur := range w.running {
		cur.stop()
		delete(w.running, key)
	}
}
