package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/issuer"
)

// userPrefixes are the people ichor-ui acts for: Ichor users and the
// OpenID provider's, as kube-apiserver's authentication configuration
// prefixes them.
var userPrefixes = []string{"ichor:", "oidc:"}

// RoleGroups are the Ichor roles, the groups a page names a person by.
var RoleGroups = []string{"ichor:viewer", "ichor:operator", "ichor:admin"}

// servable is who ichor-ui serves: a person of Ichor or of the OpenID
// provider, never a system: name. kube-apiserver's authentication
// configuration already refuses such tokens; this keeps the console from
// serving any other token kube-apiserver might accept (a ServiceAccount's
// pasted as a password, say). Groups keep the Ichor roles, for the pages.
func servable(who authenticationv1.UserInfo) (identity, error) {
	name := who.Username
	if strings.HasPrefix(name, "system:") || !slices.ContainsFunc(userPrefixes, func(p string) bool { return strings.HasPrefix(name, p) && len(name) > len(p) }) {
		return identity{}, fmt.Errorf("%q is not a person ichor-ui acts for: only %s names are", name, strings.Join(userPrefixes, " and "))
	}
	var groups []string
	for _, g := range who.Groups {
		if slices.Contains(RoleGroups, g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	return identity{User: name, Groups: slices.Compact(groups)}, nil
}

// errSignIn is a refused sign-in, in words for the person.
type errSignIn struct{ msg string }

func (e *errSignIn) Error() string { return e.msg }

// tokens is the issuer's answer to a grant.
type tokens struct {
	IDToken      string `json:"id_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int64  `json:"expires_in"`
}

// grant asks the issuer's token endpoint for tokens.
func (s *Server) grant(ctx context.Context, form url.Values) (*tokens, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.IssuerURL+issuer.TokenPath, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	forBrowser(req)
	resp, err := s.issuerClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach ichor-auth: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck
	if resp.StatusCode != http.StatusOK {
		var oe struct {
			Code        string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&oe)
		if resp.StatusCode >= 500 || oe.Description == "" {
			return nil, fmt.Errorf("ichor-auth answered %s", resp.Status)
		}
		return nil, &errSignIn{msg: oe.Description}
	}
	var t tokens
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&t); err != nil {
		return nil, fmt.Errorf("ichor-auth's answer: %w", err)
	}
	if t.IDToken == "" {
		return nil, errors.New("ichor-auth answered without an ID token")
	}
	return &t, nil
}

// signedInAs is what a sign-in, or a renewal of one, yields.
type signedInAs struct {
	who identity
	// token is the person's ID token: the credential ichor-ui presents to
	// kube-apiserver for them, until renewAt.
	token string
	// refresh is the refresh token of the sign-in, ichor-auth's or the
	// OpenID provider's.
	refresh string
	// renewAt is when the sign-in is looked at again, a little before the
	// ID token expires.
	renewAt time.Time
}

// Renewal is due a little before an ID token expires, so that no request
// runs on a token whose issuer's clock has just ended it: renewMargin
// before, or a fifth of the token's remaining life when that is shorter
// (short lifetimes in tests), and never sooner than minRenewal from now
// when the token lives that long.
const (
	renewMargin = time.Minute
	minRenewal  = 30 * time.Second
)

// renewAt is when to renew a sign-in whose ID token expires at expiry.
func (s *Server) renewAt(expiry time.Time) time.Time {
	now := s.now()
	left := expiry.Sub(now)
	margin := min(renewMargin, left/5)
	at := expiry.Add(-margin)
	if soonest := now.Add(minRenewal); at.Before(soonest) && soonest.Before(expiry) {
		return soonest
	}
	return at
}

// whoIs asks kube-apiserver who token is, with the token alone: ichor-ui
// then acts as exactly that person, with that token.
func (s *Server) whoIs(ctx context.Context, token string) (identity, error) {
	cs, err := kubernetes.NewForConfig(s.withToken(token))
	if err != nil {
		return identity{}, err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return identity{}, fmt.Errorf("kube-apiserver did not accept the sign-in: %w", err)
	}
	who, err := servable(review.Status.UserInfo)
	if err != nil {
		return identity{}, &errSignIn{msg: err.Error()}
	}
	who.ManagesUsers = s.mayWith(ctx, s.withToken(token), "", "list", "ichorusers", "")
	return who, nil
}

// signIn checks an Ichor user's password with ichor-auth, and returns who
// they are to kube-apiserver with their tokens.
func (s *Server) signIn(ctx context.Context, user, password string) (signedInAs, error) {
	return s.signInWith(ctx, url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}})
}

// renew looks at a session's person again with its refresh token, as
// kubectl's exec plugin does when the ID token expires.
func (s *Server) renew(ctx context.Context, se *session) (signedInAs, error) {
	if se.refresh == "" {
		return signedInAs{}, &errSignIn{msg: "your sign-in ended"}
	}
	if se.viaOIDC && s.oidc != nil {
		return s.oidcRenew(ctx, se)
	}
	return s.signInWith(ctx, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {se.refresh}})
}

// signInWith asks ichor-auth for tokens with a grant, and kube-apiserver
// who the ID token is.
func (s *Server) signInWith(ctx context.Context, grant url.Values) (signedInAs, error) {
	t, err := s.grant(ctx, grant)
	if err != nil {
		return signedInAs{}, err
	}
	who, err := s.whoIs(ctx, t.IDToken)
	if err != nil {
		return signedInAs{}, err
	}
	return signedInAs{who: who, token: t.IDToken, refresh: t.RefreshToken, renewAt: s.renewAt(s.now().Add(time.Duration(t.ExpiresIn) * time.Second))}, nil
}

// withToken is a client config that presents token and nothing else:
// ichor-ui holds no credential of its own (s.kube has none), so every
// request it sends is the person's, authenticated and authorized as them.
func (s *Server) withToken(token string) *rest.Config {
	cfg := rest.CopyConfig(s.kube)
	cfg.BearerToken = token
	return cfg
}

// as is a client config acting as the session's person, with their own
// ID token.
func (s *Server) as(se *session) *rest.Config {
	return s.withToken(se.token)
}

// ichorClient is Ichor's API with cfg (as or streamingAs a person); false
// once it answered 500, when the console's own client config makes none.
func (s *Server) ichorClient(w http.ResponseWriter, cfg *rest.Config) (versioned.Interface, bool) {
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		klog.InfoS("no client for Ichor's API", "err", err)
		http.Error(w, "cannot reach the API", http.StatusInternalServerError)
		return nil, false
	}
	return cs, true
}

// streamingAs is as for a watch or a download: without the client's
// timeout, which would cut a stream that takes longer, and bounded by the
// request's context instead.
func (s *Server) streamingAs(se *session) *rest.Config {
	cfg := s.as(se)
	cfg.Timeout = 0
	return cfg
}
