package issuer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/ratelimit"
)

// Config is what an Issuer needs.
type Config struct {
	// URL is the issuer: the iss of its tokens, and where kube-apiserver and
	// clients find its discovery document (URL + /.well-known/openid-configuration).
	URL string
	// Audience is the aud of its tokens: what kube-apiserver's authenticator
	// for this issuer expects.
	Audience string
	// TokenLifetime is how long an ID token is valid: a disabled user is
	// locked out within it.
	TokenLifetime time.Duration
	// SessionLifetime is how long a sign-in can be renewed with refresh tokens.
	SessionLifetime time.Duration
	// KeyRotation is how often a new signing key is made, and how long it is
	// published before it signs.
	KeyRotation, KeyLead time.Duration
	// Namespace, KeysSecret and SessionsSecret name the two Secrets the
	// issuer keeps its signing keys and its sessions in.
	Namespace, KeysSecret, SessionsSecret string
	// Kube reads and writes those Secrets; Ichor reads IchorUsers and the
	// installation, and checks passwords (ichorusers/NAME/login).
	Kube  kubernetes.Interface
	Ichor versioned.Interface
}

// Issuer signs tokens for IchorUsers.
type Issuer struct {
	cfg      Config
	prefix   string // the issuer URL's path, which every endpoint is under
	keys     *secretFile
	sessions *secretFile
	// copied is this replica's copy of the sessions, read again only as
	// sessionsCopy says.
	copied *sessionsCopy
	limits *ratelimit.Limiter
	// now is the issuer's one clock: of sign-ins, refreshes and
	// revocations, and of the keys' rotation and freshness.
	now func() time.Time

	mu  sync.RWMutex
	set *keySet // nil until the first sync
	// synced is when the key set was last read: a replica that has not
	// read it for long may sign with a key the others dropped, and stops.
	synced time.Time
}

// Data keys of the two Secrets.
const (
	keysDataKey     = "keys.json"
	sessionsDataKey = "sessions.json"
)

// New checks cfg and returns an Issuer; Run keeps its keys.
func New(cfg Config) (*Issuer, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("issuer URL %q: %w", cfg.URL, err)
	case u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.HasSuffix(u.Path, "/"):
		return nil, fmt.Errorf("issuer URL %q: must be https://host[:port][/path], without query, fragment, user or trailing slash", cfg.URL)
	case cfg.Audience == "":
		return nil, errors.New("an audience is required")
	case cfg.TokenLifetime <= 0 || cfg.SessionLifetime < cfg.TokenLifetime:
		return nil, fmt.Errorf("the session lifetime (%s) must be at least the token lifetime (%s), which must be positive", cfg.SessionLifetime, cfg.TokenLifetime)
	case cfg.KeyRotation <= cfg.KeyLead || cfg.KeyLead <= 0:
		return nil, fmt.Errorf("the key rotation period (%s) must be longer than the key publish lead (%s), which must be positive", cfg.KeyRotation, cfg.KeyLead)
	}
	i := &Issuer{
		cfg:      cfg,
		prefix:   strings.TrimSuffix(u.Path, "/"),
		keys:     &secretFile{client: cfg.Kube, namespace: cfg.Namespace, name: cfg.KeysSecret, key: keysDataKey},
		sessions: &secretFile{client: cfg.Kube, namespace: cfg.Namespace, name: cfg.SessionsSecret, key: sessionsDataKey},
		limits:   newLimiter(),
		now:      time.Now,
	}
	i.copied = &sessionsCopy{file: i.sessions, now: func() time.Time { return i.now() }}
	return i, nil
}

// policy is the key rotation policy of cfg.
func (i *Issuer) policy() rotationPolicy {
	return rotationPolicy{Period: i.cfg.KeyRotation, Lead: i.cfg.KeyLead, TokenLifetime: i.cfg.TokenLifetime}
}

// SyncKeys reads the key set, rotates it as due (writing it back under
// the Secret's resourceVersion, so that replicas agree) and serves it.
func (i *Issuer) SyncKeys(ctx context.Context) error {
	var synced *keySet
	err := i.keys.update(ctx, func(data []byte) ([]byte, error) {
		set, err := parseKeySet(data)
		if err != nil {
			return nil, err
		}
		synced = set
		changed, err := set.rotate(i.now(), i.policy())
		if err != nil || !changed {
			return nil, err
		}
		return set.marshal()
	})
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.set, i.synced = synced, i.now()
	i.mu.Unlock()
	return nil
}

// staleAfter is how long after its last read the key set is no longer
// trusted to sign: half the lead time, within which every replica reads a
// new key before it signs.
func (i *Issuer) staleAfter() time.Duration { return i.cfg.KeyLead / 2 }

// signingKey is the key to sign with at now, or nil when there is none or
// the key set is stale.
func (i *Issuer) signingKey(now time.Time) *signingKey {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.set == nil || now.Sub(i.synced) > i.staleAfter() {
		return nil
	}
	return i.set.signing(now)
}

// Run syncs the keys until ctx ends, often enough that every replica
// publishes a new key well before it signs.
func (i *Issuer) Run(ctx context.Context) {
	every := min(30*time.Second, i.staleAfter()/4)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := i.SyncKeys(ctx); err != nil {
			klog.ErrorS(err, "sync the signing keys")
		}
	}, every)
}

// Ready reports whether the issuer has keys, read lately, to sign with.
func (i *Issuer) Ready() bool { return i.signingKey(i.now()) != nil }

// publicKeys is the JWKS served now.
func (i *Issuer) publicKeys() jose.JSONWebKeySet {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.set == nil {
		return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	}
	return i.set.publicKeys()
}

// claims are the issuer's own claims beside the registered ones: the
// user's UID and role, which kube-apiserver maps to the user's uid and
// ichor:<role> group.
type claims struct {
	UID  types.UID `json:"uid"`
	Role string    `json:"role"`
}

// mint signs an ID token for user at now.
func (i *Issuer) mint(user string, uid types.UID, role string, now time.Time) (string, time.Time, error) {
	k := i.signingKey(now)
	if k == nil {
		return "", time.Time{}, errors.New("no signing key read lately: the keys Secret cannot be read")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: signingAlgorithm, Key: jose.JSONWebKey{Key: k.private, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", time.Time{}, err
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(i.cfg.TokenLifetime)
	token, err := jwt.Signed(signer).Claims(jwt.Claims{
		Issuer: i.cfg.URL, Subject: user, Audience: jwt.Audience{i.cfg.Audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(exp),
		ID: base64.RawURLEncoding.EncodeToString(jti),
	}).Claims(claims{UID: uid, Role: role}).Serialize()
	return token, exp, err
}
