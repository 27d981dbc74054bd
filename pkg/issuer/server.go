package issuer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/passwordhash"
)

// The endpoints, under the issuer URL's path.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	KeysPath      = "/keys"
	TokenPath     = "/token"
	RevokePath    = "/revoke"
)

// maxFormBytes bounds a request body: a password is at most 1 KiB.
const maxFormBytes = 8 << 10

// Handler serves the issuer's endpoints.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+i.prefix+DiscoveryPath, i.discovery)
	mux.HandleFunc("GET "+i.prefix+KeysPath, i.jwks)
	mux.HandleFunc("POST "+i.prefix+TokenPath, i.token)
	mux.HandleFunc("POST "+i.prefix+RevokePath, i.revoke)
	return mux
}

// discovery is the OpenID provider metadata kube-apiserver and clients read.
func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                i.cfg.URL,
		"jwks_uri":                              i.cfg.URL + KeysPath,
		"token_endpoint":                        i.cfg.URL + TokenPath,
		"revocation_endpoint":                   i.cfg.URL + RevokePath,
		"grant_types_supported":                 []string{"password", "refresh_token"},
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{string(signingAlgorithm)},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"claims_supported":                      []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "uid", "role"},
	})
}

// jwks publishes the public keys. A verifier refetches them when it meets
// a key ID it does not know, and keys are published a lead time before
// they sign, so a short cache lifetime is safe.
func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=60")
	writeJSON(w, http.StatusOK, i.publicKeys())
}

// tokenResponse is RFC 6749's successful token response; access_token and
// id_token are the same JWT, which kubectl sends as a bearer token.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	IDToken      string `json:"id_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
}

// oauthError is RFC 6749's error response.
type oauthError struct {
	status      int
	Code        string `json:"error"`
	Description string `json:"error_description"`
	retryAfter  time.Duration
}

func (e *oauthError) Error() string { return e.Code + ": " + e.Description }

// errWrongCredentials is the one answer to a wrong password, an unknown
// user, or a user without a password: it does not say which.
var errWrongCredentials = &oauthError{status: http.StatusBadRequest, Code: "invalid_grant", Description: "the username or password is wrong"}

func grantError(format string, args ...any) *oauthError {
	return &oauthError{status: http.StatusBadRequest, Code: "invalid_grant", Description: fmt.Sprintf(format, args...)}
}

func unavailable(err error, what string) *oauthError {
	klog.ErrorS(err, what)
	return &oauthError{status: http.StatusServiceUnavailable, Code: "temporarily_unavailable",
		Description: "the issuer cannot " + what + " now; try again later"}
}

// token is the token endpoint: the password and refresh_token grants.
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, &oauthError{status: http.StatusBadRequest, Code: "invalid_request", Description: "the body is not a form of at most 8 KiB"})
		return
	}
	var resp *tokenResponse
	var err error
	switch grant := r.PostForm.Get("grant_type"); grant {
	case "password":
		resp, err = i.passwordGrant(r.Context(), source(r), r.PostForm.Get("username"), r.PostForm.Get("password"))
	case "refresh_token":
		resp, err = i.refreshGrant(r.Context(), source(r), r.PostForm.Get("refresh_token"))
	default:
		err = &oauthError{status: http.StatusBadRequest, Code: "unsupported_grant_type",
			Description: fmt.Sprintf("grant_type %q: the issuer takes password and refresh_token", grant)}
	}
	if err != nil {
		var oe *oauthError
		if !errors.As(err, &oe) {
			oe = unavailable(err, "sign tokens")
		}
		writeError(w, oe)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// ClientAddressHeader carries the address of the browser a console's
// request is for. Every console sign-in and renewal comes from the
// console's own address, so its browsers would otherwise share one limit,
// which anyone could use up. The header counts only on a connection whose
// client certificate the trusted-proxy CA issued (Config.TrustedProxies's
// pool, verified in the TLS handshake): no one else can name an address.
const ClientAddressHeader = "Ichor-Client-Address"

// source is the address a request came from, for its rate limit: the
// connection's, or the one a trusted proxy names.
func source(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if ip, err := netip.ParseAddr(r.Header.Get(ClientAddressHeader)); err == nil {
			return ip.Unmap().String()
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limited is the answer to an attempt over its rate limit; what names
// the attempts.
func limited(wait time.Duration, what string) *oauthError {
	return &oauthError{status: http.StatusTooManyRequests, Code: "slow_down", retryAfter: wait,
		Description: fmt.Sprintf("too many %s; try again in %s", what, wait.Round(time.Second))}
}

// passwordGrant signs user in with password.
func (i *Issuer) passwordGrant(ctx context.Context, from, user, password string) (*tokenResponse, error) {
	if user == "" || password == "" {
		return nil, &oauthError{status: http.StatusBadRequest, Code: "invalid_request", Description: "username and password are required"}
	}
	if wait := i.limits.Take(i.now(), userKey(user), sourceKey(from)); wait > 0 {
		klog.InfoS("Sign-in attempt refused over its rate limit", "user", user, "source", from, "retryAfter", wait)
		return nil, limited(wait, "sign-in attempts")
	}
	if err := i.usersEnabled(ctx); err != nil {
		return nil, err
	}
	// What no IchorUser can be, or no password can match, is answered as a
	// wrong password, in as long as one takes.
	if len(validation.IsDNS1123Subdomain(user)) > 0 || len(password) > passwordhash.MaxBytes {
		return nil, i.wrongCredentials(password)
	}
	u, err := i.cfg.Ichor.IchorV1alpha1().IchorUsers().Login(ctx, user, &v1alpha1.IchorUserLogin{Password: password}, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, i.wrongCredentials(password)
	case isPasswordMismatch(err):
		return nil, errWrongCredentials
	case isDisabled(err):
		return nil, grantError("the user is disabled; an Ichor admin can enable it")
	case apierrors.IsTooManyRequests(err):
		return nil, busy()
	case err != nil:
		return nil, unavailable(err, "check passwords")
	}
	now := i.now()
	var refresh string
	if err := i.changeSessions(ctx, now, func(s sessions) (bool, error) {
		var err error
		_, refresh, err = s.start(u.Name, u.UID, passwordChangedAt(u), now, i.cfg.SessionLifetime)
		return err == nil, err
	}); err != nil {
		return nil, unavailable(err, "record the session")
	}
	return i.respond(u.Name, u, refresh, now)
}

// wrongCredentials is errWrongCredentials after the work of a password
// check, so that its time does not tell an unknown user from a wrong
// password; busy when as many checks as a process runs at once are running.
func (i *Issuer) wrongCredentials(password string) error {
	release, ok := passwordhash.Acquire()
	if !ok {
		return busy()
	}
	defer release()
	passwordhash.VerifyNothing(password)
	return errWrongCredentials
}

// busy is the answer when too many passwords are being checked at once.
func busy() *oauthError {
	return &oauthError{status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", retryAfter: time.Second,
		Description: "too many sign-ins at once; try again in a second"}
}

// isPasswordMismatch reports whether err is ichorusers/NAME/login's
// refusal of the password.
func isPasswordMismatch(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		return false
	}
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Field == "password" {
				return true
			}
		}
	}
	return false
}

// isDisabled reports whether err is ichorusers/NAME/login's refusal of a
// disabled user (a right password).
func isDisabled(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsForbidden(err) {
		return false
	}
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Type == v1alpha1.CauseTypeUserDisabled {
				return true
			}
		}
	}
	return false
}

// usersEnabled refuses a sign-in while the installation has Ichor users off.
func (i *Issuer) usersEnabled(ctx context.Context) error {
	inst, err := i.cfg.Ichor.IchorV1alpha1().IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return unavailable(err, "read the installation's settings")
	case inst.Spec.Settings.UsersEnabled:
		return nil
	}
	return &oauthError{status: http.StatusBadRequest, Code: "unauthorized_client",
		Description: "sign-in with Ichor users is off on this installation (IchorInstallation " + v1alpha1.InstallationName + ", spec.settings.usersEnabled)"}
}

// refreshGrant renews a session: the user must still exist, be enabled and
// have the password the session began with. Refreshes and revocations are
// limited per source address, before anything: a refresh token is never
// guessed, but each one that renews a session costs reads and a write.
func (i *Issuer) refreshGrant(ctx context.Context, from, token string) (*tokenResponse, error) {
	if token == "" {
		return nil, &oauthError{status: http.StatusBadRequest, Code: "invalid_request", Description: "refresh_token is required"}
	}
	if wait := i.limits.Take(i.now(), renewalKey(from)); wait > 0 {
		klog.InfoS("Session renewal refused over its rate limit", "source", from, "retryAfter", wait)
		return nil, limited(wait, "session renewals")
	}
	sess, err := i.copied.known(ctx, token)
	if err != nil {
		return nil, unavailable(err, "read the sessions")
	}
	if sess == nil {
		return nil, grantError("%s", errUnknownSession)
	}
	// The user as it is now decides, before the token is renewed.
	why := ""
	u, err := i.cfg.Ichor.IchorV1alpha1().IchorUsers().Get(ctx, sess.User, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && u.UID != sess.UID):
		why = "the user no longer exists"
	case err != nil:
		return nil, unavailable(err, "read the user")
	case u.Spec.Disabled:
		why = "the user is disabled"
	case !passwordChangedAt(u).Equal(sess.PasswordChangedAt):
		why = "the user's password changed"
	}
	if why == "" {
		if err := i.usersEnabled(ctx); err != nil {
			var oe *oauthError
			if errors.As(err, &oe) && oe.status != http.StatusBadRequest {
				return nil, err
			}
			why = "sign-in with Ichor users was turned off"
		}
	}
	now := i.now()
	var renewed *session
	var next string
	var renewErr error
	if err := i.changeSessions(ctx, now, func(s sessions) (bool, error) {
		if why != "" {
			return s.end(token), nil
		}
		// A replayed token ends the session: that too is written.
		var changed bool
		renewed, next, changed, renewErr = s.renew(token, now)
		return changed, nil
	}); err != nil {
		return nil, unavailable(err, "record the session")
	}
	switch {
	case why != "":
		return nil, grantError("%s: the session has ended", why)
	case renewErr != nil:
		return nil, grantError("%s", renewErr)
	}
	return i.respond(renewed.User, u, next, now)
}

// respond signs the token of the response.
func (i *Issuer) respond(user string, u *v1alpha1.IchorUser, refresh string, now time.Time) (*tokenResponse, error) {
	token, exp, err := i.mint(user, u.UID, string(u.Spec.Role), now)
	if err != nil {
		return nil, err
	}
	return &tokenResponse{AccessToken: token, IDToken: token, TokenType: "Bearer",
		ExpiresIn: int64(math.Floor(exp.Sub(now).Seconds())), RefreshToken: refresh}, nil
}

// revoke ends the session of a refresh token (RFC 7009): the answer is 200
// whether or not there was one. It shares the refreshes' limit.
func (i *Issuer) revoke(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("token") == "" {
		writeError(w, &oauthError{status: http.StatusBadRequest, Code: "invalid_request", Description: "token is required"})
		return
	}
	now := i.now()
	if wait := i.limits.Take(now, renewalKey(source(r))); wait > 0 {
		klog.InfoS("Revocation refused over its rate limit", "source", source(r), "retryAfter", wait)
		writeError(w, limited(wait, "session renewals"))
		return
	}
	token := r.PostForm.Get("token")
	sess, err := i.copied.known(r.Context(), token)
	if err == nil && sess != nil {
		err = i.changeSessions(r.Context(), now, func(s sessions) (bool, error) {
			return s.end(token), nil
		})
	}
	if err != nil {
		writeError(w, unavailable(err, "end the session"))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// changeSessions reads the sessions, drops those expired at now, and has
// change change them; they are written back, under the Secret's
// resourceVersion, only when change reports a change. This replica's copy
// takes what was read, and written.
func (i *Issuer) changeSessions(ctx context.Context, now time.Time, change func(sessions) (bool, error)) error {
	at := i.now()
	var seen sessions
	err := i.sessions.update(ctx, func(data []byte) ([]byte, error) {
		s, err := parseSessions(data)
		if err != nil {
			return nil, err
		}
		s.prune(now)
		seen = s
		if changed, err := change(s); err != nil || !changed {
			return nil, err
		}
		return json.Marshal(s)
	})
	if err == nil && seen != nil {
		i.copied.store(seen, at)
	}
	return err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *oauthError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.retryAfter.Seconds()))))
	}
	writeJSON(w, e.status, e)
}

// passwordChangedAt is when u's password last changed, as a session
// records it; zero for none.
func passwordChangedAt(u *v1alpha1.IchorUser) time.Time {
	if u.Status.PasswordChangedAt == nil {
		return time.Time{}
	}
	return u.Status.PasswordChangedAt.UTC()
}
