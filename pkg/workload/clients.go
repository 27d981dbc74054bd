package workload

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Clients keeps, per cluster, a client of its Kubernetes API as
// ichor-controller's own identity there (Controller), so that the polls of
// a step or a rollout in flight reuse one connection instead of signing a certificate and
// opening a TLS connection each time. A client is replaced at half its
// certificate's lifetime, and when the cluster's endpoint or Kubernetes CA
// changes.
type Clients struct {
	mu      sync.Mutex
	clients map[types.UID]*kubeClient
}

type kubeClient struct {
	cs      kubernetes.Interface
	key     [sha256.Size]byte // endpoint and CA it was made for
	renewAt time.Time
}

// Get returns the client of the cluster (uid) at endpoint for bundle,
// trusting alsoTrusted too (see ClientConfig).
func (k *Clients) Get(uid types.UID, endpoint string, bundle *secrets.Bundle, now time.Time, ttl time.Duration, alsoTrusted ...[]byte) (kubernetes.Interface, error) {
	key := sha256.Sum256(bytes.Join(append([][]byte{[]byte(endpoint), bundle.Certs.K8s.Crt}, alsoTrusted...), []byte{0}))
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.clients[uid]; c != nil && c.key == key && now.Before(c.renewAt) {
		return c.cs, nil
	}
	cfg, err := ClientConfig(bundle, endpoint, Controller, now, ttl, alsoTrusted...)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if k.clients == nil {
		k.clients = map[types.UID]*kubeClient{}
	}
	k.clients[uid] = &kubeClient{cs: cs, key: key, renewAt: now.Add(ttl / 2)}
	return cs, nil
}
