package talossim

import (
	"sync"

	"github.com/siderolabs/crypto/x509"
)

// Trustd stands in for the trustd service of a cluster's control planes. A
// worker's config carries machine.ca without its key, and a real worker gets
// its apid certificate from trustd on a control plane. Nodes sharing a Trustd
// (Options.Trustd) do the same: a configured control plane offers the Talos
// API CA of its config, and a worker whose machine.ca has no key is served by
// the control plane holding it. Until one is configured, the worker's API is
// unavailable, as it is on real nodes.
type Trustd struct {
	mu  sync.Mutex
	cas map[string]*x509.PEMEncodedCertificateAndKey // by certificate PEM
}

// NewTrustd returns a Trustd no control plane has offered a CA to yet.
func NewTrustd() *Trustd {
	return &Trustd{cas: map[string]*x509.PEMEncodedCertificateAndKey{}}
}

// offer makes ca (with its key) available to the workers of its cluster.
func (t *Trustd) offer(ca *x509.PEMEncodedCertificateAndKey) {
	if t == nil || ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	t.cas[string(ca.Crt)] = ca
}

// lookup returns the CA with certificate crt, if a control plane offered it.
func (t *Trustd) lookup(crt []byte) *x509.PEMEncodedCertificateAndKey {
	if t == nil {
		return nil
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	return t.cas[string(crt)]
}
