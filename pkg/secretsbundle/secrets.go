package secretsbundle

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// Secrets are a cluster's secrets as they are in force: the bundle of its
// Secret, except that during a CA rotation its Talos API CA (Certs.OS) and
// its Kubernetes CA (Certs.K8s) are the CAs that issue in the rotation's
// phase; and the CAs the nodes accept beside them.
type Secrets struct {
	*secrets.Bundle
	// TalosAccepted are the PEM certificates of the Talos API CAs the
	// nodes accept besides Certs.OS (machine.acceptedCAs): during a
	// rotation, the other CA; otherwise none.
	TalosAccepted [][]byte
	// KubernetesAccepted are those of the Kubernetes CAs accepted besides
	// Certs.K8s (cluster.acceptedCAs), likewise.
	KubernetesAccepted [][]byte
	// ServiceAccountAccepted are the PEM public keys of the
	// service-account keys kube-apiserver accepts besides the one that
	// signs (Certs.K8sServiceAccount): during a key rotation, the other
	// key; otherwise none.
	ServiceAccountAccepted [][]byte
	// EncryptionKeys are the secretbox keys kube-apiserver encrypts
	// Secrets with, the first encrypting, each decrypting: during a key
	// rotation, both; nil when the bundle's key alone is in force under
	// Talos's own name for it.
	EncryptionKeys []render.EncryptionKey
}

// TalosCA is the PEM of every Talos API CA a client trusts a node's
// certificate from: the issuing one and the accepted ones, since during a
// rotation nodes move from one to the other one by one.
func (s *Secrets) TalosCA() []byte {
	return bytes.Join(append([][]byte{s.Certs.OS.Crt}, s.TalosAccepted...), nil)
}

// KubernetesCA is the PEM of every Kubernetes CA a client trusts
// kube-apiserver's certificate from, likewise.
func (s *Secrets) KubernetesCA() []byte {
	return bytes.Join(append([][]byte{s.Certs.K8s.Crt}, s.KubernetesAccepted...), nil)
}

// TalosCredentials returns a client certificate for roles from the issuing
// Talos API CA, valid for ttl from at most ttl/4 ago, trusting every CA in
// force. One is minted when none of the issuing CA, roles and ttl is that
// fresh (see minted).
func (s *Secrets) TalosCredentials(roles role.Set, now time.Time, ttl time.Duration) (talos.Credentials, error) {
	creds, ok := minted.get(s.Bundle, roles, now, ttl)
	if !ok {
		var err error
		if creds, err = talos.MintCredentials(s.Bundle, roles, now, ttl); err != nil {
			return talos.Credentials{}, err
		}
		minted.put(s.Bundle, roles, now, ttl, creds)
	}
	creds.CA = s.TalosCA()
	return creds, nil
}

// minted keeps the controller's own Talos credentials. Minting one (a key
// pair, a CSR, its signature and verification) for every reconcile of every
// machine was a tenth of ichor-controller's CPU with 10,000 machines; one
// certificate now serves every session of a cluster for the first quarter
// of its lifetime, so each has three quarters of it left when a session
// opens, which is more than callers that renew half-way (the kubelet-serving
// approver) count on. They stay in memory, as the CA key they come from does.
var minted = &credentialCache{}

// maxMinted bounds the cache: past it, it starts over.
const maxMinted = 4096

type credentialCache struct {
	mu      sync.Mutex
	entries map[credentialKey]mintedCredentials
}

// credentialKey is the issuing CA (certificate and key), roles and lifetime.
type credentialKey struct {
	ca, roles string
	ttl       time.Duration
}

type mintedCredentials struct {
	at    time.Time
	creds talos.Credentials
}

func keyOf(bundle *secrets.Bundle, roles role.Set, ttl time.Duration) (credentialKey, bool) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.OS == nil {
		return credentialKey{}, false
	}
	return credentialKey{ca: string(bundle.Certs.OS.Crt) + string(bundle.Certs.OS.Key), roles: strings.Join(roles.Strings(), ","), ttl: ttl}, true
}

func (c *credentialCache) get(bundle *secrets.Bundle, roles role.Set, now time.Time, ttl time.Duration) (talos.Credentials, bool) {
	k, ok := keyOf(bundle, roles, ttl)
	if !ok {
		return talos.Credentials{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || now.Before(e.at) || !now.Before(e.at.Add(ttl/4)) {
		return talos.Credentials{}, false
	}
	return e.creds, true
}

func (c *credentialCache) put(bundle *secrets.Bundle, roles role.Set, now time.Time, ttl time.Duration, creds talos.Credentials) {
	k, ok := keyOf(bundle, roles, ttl)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxMinted {
		c.entries = map[credentialKey]mintedCredentials{}
	}
	c.entries[k] = mintedCredentials{at: now, creds: creds}
}

// InForce is bundle as it is in force in rotation's phase, with the new
// CAs next (nil: none stored yet, or no rotation). bundle is not changed:
// the result is a copy.
func InForce(bundle *secrets.Bundle, rotation *v1alpha1.CARotationStatus, next *RotationCAs) *Secrets {
	if rotation == nil || next == nil {
		return &Secrets{Bundle: bundle}
	}
	b := *bundle
	certs := *bundle.Certs
	b.Certs = &certs
	out := &Secrets{Bundle: &b}
	if next.Talos != nil {
		certs.OS, out.TalosAccepted = phaseCAs(rotation.Phase, bundle.Certs.OS, next.Talos)
	}
	if next.Kubernetes != nil {
		certs.K8s, out.KubernetesAccepted = phaseCAs(rotation.Phase, bundle.Certs.K8s, next.Kubernetes)
	}
	return out
}

// phaseCAs are the issuing CA and the accepted ones of a CA moving from old
// to next, in phase.
func phaseCAs(phase v1alpha1.CARotationPhase, old, next *x509.PEMEncodedCertificateAndKey) (*x509.PEMEncodedCertificateAndKey, [][]byte) {
	if bytes.Equal(old.Crt, next.Crt) {
		// The bundle has the new CA already (the rotation is ending).
		return next, nil
	}
	switch phase {
	case v1alpha1.CARotationIssueNew:
		return next, [][]byte{old.Crt}
	case v1alpha1.CARotationDropOld:
		return next, nil
	default:
		return old, [][]byte{next.Crt}
	}
}
