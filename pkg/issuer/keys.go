package issuer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgorithm is the one JOSE algorithm the issuer signs with; kube-
// apiserver's JWT authenticator accepts it.
const signingAlgorithm = jose.ES256

// signingKey is one key of the key set.
type signingKey struct {
	// ID is the key's kid.
	ID string `json:"kid"`
	// Created is when the key was generated and published.
	Created time.Time `json:"created"`
	// SignFrom is when the key starts signing: a lead time after it was
	// published, so that every verifier has seen it first.
	SignFrom time.Time `json:"signFrom"`
	// PKCS8 is the private key.
	PKCS8 []byte `json:"pkcs8"`

	private *ecdsa.PrivateKey
}

// keySet is every key the issuer publishes, oldest first.
type keySet struct {
	Keys []*signingKey `json:"keys"`
}

// rotationPolicy says when keys are made and dropped.
type rotationPolicy struct {
	// Period is how long a key is the newest before the next one is made.
	Period time.Duration
	// Lead is how long a new key is published before it signs.
	Lead time.Duration
	// TokenLifetime bounds how long a token lives after it was signed: a
	// key is dropped once no token it signed can still be valid.
	TokenLifetime time.Duration
}

// clockSkew is the leeway allowed to verifiers' clocks when dropping a key.
const clockSkew = time.Minute

// newSigningKey generates a key that signs from signFrom.
func newSigningKey(now, signFrom time.Time) (*signingKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &signingKey{ID: base64.RawURLEncoding.EncodeToString(id), Created: now.UTC(), SignFrom: signFrom.UTC(), PKCS8: der, private: priv}, nil
}

// signing is the key that signs at now: the newest whose time has come.
func (s *keySet) signing(now time.Time) *signingKey {
	for _, k := range slices.Backward(s.Keys) {
		if !now.Before(k.SignFrom) {
			return k
		}
	}
	return nil
}

// rotate brings s in line with p at now: a first key that signs at once,
// a new key published ahead of time when the newest is Period old, and no
// key kept past the expiry of the last token it could have signed. It
// reports whether s changed.
func (s *keySet) rotate(now time.Time, p rotationPolicy) (bool, error) {
	changed := false
	switch {
	case len(s.Keys) == 0:
		k, err := newSigningKey(now, now)
		if err != nil {
			return false, err
		}
		s.Keys, changed = append(s.Keys, k), true
	case now.Sub(s.Keys[len(s.Keys)-1].Created) >= p.Period:
		k, err := newSigningKey(now, now.Add(p.Lead))
		if err != nil {
			return false, err
		}
		s.Keys, changed = append(s.Keys, k), true
	}
	// A key stopped signing when its successor started; its last token
	// expires TokenLifetime later.
	for len(s.Keys) > 1 && now.After(s.Keys[1].SignFrom.Add(p.TokenLifetime+clockSkew)) {
		s.Keys, changed = s.Keys[1:], true
	}
	return changed, nil
}

// publicKeys is the JWKS: every key's public half.
func (s *keySet) publicKeys() jose.JSONWebKeySet {
	var set jose.JSONWebKeySet
	for _, k := range s.Keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.private.Public(), KeyID: k.ID, Algorithm: string(signingAlgorithm), Use: "sig"})
	}
	return set
}

// marshal is s as stored.
func (s *keySet) marshal() ([]byte, error) { return json.Marshal(s) }

// parseKeySet reads a stored key set; empty data is an empty set.
func parseKeySet(data []byte) (*keySet, error) {
	s := &keySet{}
	if len(data) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("parse the key set: %w", err)
	}
	for _, k := range s.Keys {
		key, err := x509.ParsePKCS8PrivateKey(k.PKCS8)
		if err != nil {
			return nil, fmt.Errorf("parse key %s: %w", k.ID, err)
		}
		priv, ok := key.(*ecdsa.PrivateKey)
		if !ok || priv.Curve != elliptic.P256() {
			return nil, fmt.Errorf("key %s is not a P-256 ECDSA key", k.ID)
		}
		k.private = priv
	}
	slices.SortStableFunc(s.Keys, func(a, b *signingKey) int { return a.Created.Compare(b.Created) })
	return s, nil
}
