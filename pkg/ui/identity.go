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

// RoleGroups are the groups ichor-ui impersonates, the Ichor roles; its
// RBAC names exactly these.
var RoleGroups = []string{"ichor:viewer", "ichor:operator", "ichor:admin"}

// servable is who as ichor-ui acts for them: a person of Ichor or of the
// OpenID provider, never a system: name, with the Ichor role groups only
// (impersonation adds system:authenticated by itself). The RBAC cannot
// express the name's prefix, so this check is what holds it.
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

// whoIs asks kube-apiserver who token is, once: ichor-ui then acts as
// exactly that person, and forgets the token.
func (s *Server) whoIs(ctx context.Context, token string) (identity, error) {
	cfg := rest.AnonymousClientConfig(s.kube)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
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
	who.ManagesUsers = s.mayIn(ctx, who, "", "list", "ichorusers", "")
	return who, nil
}

// signIn checks an Ichor user's password with ichor-auth, and returns who
// they are to kube-apiserver, the refresh token and when to look again.
func (s *Server) signIn(ctx context.Context, user, password string) (identity, string, time.Time, error) {
	return s.signInWith(ctx, url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}})
}

// renew looks at a session's person again with its refresh token, as
// kubectl's exec plugin does when the ID token expires.
func (s *Server) renew(ctx context.Context, se *session) (identity, string, time.Time, error) {
	if se.refresh == "" {
		return identity{}, "", time.Time{}, &errSignIn{msg: "your sign-in ended"}
	}
	if se.viaOIDC && s.oidc != nil {
		return s.oidcRenew(ctx, se)
	}
	return s.signInWith(ctx, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {se.refresh}})
}

// signInWith asks ichor-auth for tokens with a grant, and kube-apiserver
// who the ID token is.
func (s *Server) signInWith(ctx context.Context, grant url.Values) (identity, string, time.Time, error) {
	t, err := s.grant(ctx, grant)
	if err != nil {
		return identity{}, "", time.Time{}, err
	}
	who, err := s.whoIs(ctx, t.IDToken)
	if err != nil {
		return identity{}, "", time.Time{}, err
	}
	return who, t.RefreshToken, s.now().Add(time.Duration(t.ExpiresIn) * time.Second), nil
}

// as is a client config acting as who, by impersonation.
func (s *Server) as(who identity) *rest.Config {
	cfg := rest.CopyConfig(s.kube)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: who.User, Groups: who.Groups}
	return cfg
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
func (s *Server) streamingAs(who identity) *rest.Config {
	cfg := s.as(who)
	cfg.Timeout = 0
	return cfg
}
