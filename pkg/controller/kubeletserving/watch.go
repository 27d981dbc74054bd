package kubeletserving

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/kubeletserving"
	"ichor.dev/ichor/pkg/workload"
)

// watchTTL is the lifetime of the client certificate a CSR watch uses; the
// watch is restarted with a fresh one before it runs out.
const watchTTL = time.Hour

// csrWatches watch the kubelet serving requests of each enabled cluster's
// Kubernetes API and wake the cluster's reconcile when one arrives or
// changes, so that a request is decided within moments of the kubelet
// asking. The reconciler's timer still covers a watch that broke.
type csrWatches struct {
	events chan event.GenericEvent

	mu      sync.Mutex
	running map[types.NamespacedName]*csrWatch
}

type csrWatch struct {
	endpoint string
	// cas are the Kubernetes CAs it signs with and trusts: a CA rotation's
	// phase renews it.
	cas     string
	renewAt time.Time
	cancel  context.CancelFunc
}

func newCSRWatches() *csrWatches {
	return &csrWatches{events: make(chan event.GenericEvent, 64), running: map[types.NamespacedName]*csrWatch{}}
}

// ensure runs a watch for cluster at its current endpoint, with a client
// of the bundle's Kubernetes CA trusting accepted too.
func (w *csrWatches) ensure(ctx context.Context, cluster *v1alpha1.TalosCluster, bundle *secrets.Bundle, accepted [][]byte, now time.Time) error {
	key := types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Name}
	endpoint := cluster.Spec.ControlPlane.Endpoint
	cas := string(bytes.Join(append([][]byte{bundle.Certs.K8s.Crt}, accepted...), nil))
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.running[key]; ok {
		if cur.endpoint == endpoint && cur.cas == cas && now.Before(cur.renewAt) {
			return nil
		}
		cur.cancel()
		delete(w.running, key)
	}
	cfg, err := workload.ClientConfig(bundle, endpoint, workload.Controller, now, watchTTL, accepted...)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", kubeletserving.Signer).String()
	}))
	informer := factory.Certificates().V1().CertificateSigningRequests().Informer()
	wake := func(any) {
		select {
		case w.events <- event.GenericEvent{Object: &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		default: // a wake-up is queued already; the reconcile lists every request
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
	}); err != nil {
		return err
	}
	// The watch outlives this reconcile: it runs until stopped or renewed.
	watchCtx, cancel := context.WithCancel(context.Background())
	factory.Start(watchCtx.Done())
	w.running[key] = &csrWatch{endpoint: endpoint, cas: cas, renewAt: now.Add(watchTTL * 3 / 4), cancel: cancel}
	log.FromContext(ctx).V(1).Info("Watching kubelet serving requests", "endpoint", endpoint)
	return nil
}

// stop ends cluster's watch, if any.
func (w *csrWatches) stop(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.running[key]; ok {
		cur.cancel()
		delete(w.running, key)
	}
}

// stopAll ends every watch, when the manager stops.
func (w *csrWatches) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, cur := range w.running {
		cur.cancel()
		delete(w.running, key)
	}
}
