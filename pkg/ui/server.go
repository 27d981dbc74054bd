package ui

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/issuer"
	"ichor.dev/ichor/pkg/ratelimit"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the console.
type Options struct {
	// IssuerURL is ichor-auth's issuer URL, where Ichor users sign in.
	IssuerURL string
	// IssuerClient reaches ichor-auth, trusting its serving CA.
	IssuerClient *http.Client
	// Kube says where kube-apiserver is and which CA its serving
	// certificate is from. Any credential in it is dropped: ichor-ui
	// sends every request with the person's own ID token.
	Kube *rest.Config
	// OIDC is the OpenID provider people may also sign in at; nil: none.
	OIDC *OIDCOptions
	// SessionLifetime bounds a session, however often it is renewed.
	SessionLifetime time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Server is the console's HTTP handler.
type Server struct {
	opts         Options
	kube         *rest.Config
	issuerClient *http.Client
	sessions     *sessions
	signIns      *ratelimit.Limiter
	oidc         *provider
	pages        map[string]*template.Template
	mux          *http.ServeMux
}

// New returns the console.
func New(opts Options) (*Server, error) {
	if opts.IssuerURL == "" || opts.Kube == nil {
		return nil, errors.New("the issuer URL and a Kubernetes client config are required")
	}
	if opts.IssuerClient == nil {
		opts.IssuerClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.SessionLifetime <= 0 {
		opts.SessionLifetime = 12 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, kube: rest.AnonymousClientConfig(opts.Kube), issuerClient: opts.IssuerClient, sessions: newSessions(), signIns: newSignInLimiter(), pages: map[string]*template.Template{}}
	for _, page := range []string{"login", "clusters", "cluster", "operations", "operation", "start", "refused", "patches", "users", "continue"} {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		s.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	if opts.OIDC != nil {
		s.oidc = newProvider(*opts.OIDC, opts.Now)
		mux.HandleFunc("GET /oidc/start", s.oidcStart)
		mux.HandleFunc("GET /oidc/callback", s.oidcCallback)
	}
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.Handle("POST /logout", s.signedIn(s.logout))
	mux.Handle("GET /clusters", s.signedIn(s.clusters))
	mux.Handle("GET /clusters/{namespace}/{name}", s.signedIn(s.cluster))
	mux.Handle("POST /clusters/{namespace}/{name}/machines/{machine}/approval", s.signedIn(s.decide))
	mux.Handle("GET /clusters/{namespace}/{name}/machines/{machine}/downloads/{download}", s.signedIn(s.download))
	mux.Handle("GET /users", s.signedIn(s.users))
	mux.Handle("POST /users", s.signedIn(s.createUser))
	mux.Handle("POST /users/{user}/disabled", s.signedIn(s.setDisabled))
	mux.Handle("GET /clusters/{namespace}/{name}/patches", s.signedIn(s.patches))
	mux.Handle("GET /clusters/{namespace}/{name}/operations", s.signedIn(s.operations))
	mux.Handle("POST /clusters/{namespace}/{name}/operations", s.signedIn(s.createOperation))
	mux.Handle("GET /clusters/{namespace}/{name}/operations/{operation}", s.signedIn(s.operation))
	mux.Handle("GET /clusters/{namespace}/{name}/operations/{operation}/start", s.signedIn(s.confirmStart))
	mux.Handle("POST /clusters/{namespace}/{name}/operations/{operation}/start", s.signedIn(s.start))
	mux.Handle("GET /clusters/{namespace}/{name}/operations/{operation}/live", s.signedIn(s.liveOperation))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/clusters", http.StatusSeeOther) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	s.mux = mux
	return s, nil
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Run forgets ended sessions until ctx ends.
func (s *Server) Run(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.sessions.sweep(s.now())
			if s.oidc != nil {
				s.oidc.sweep()
			}
		}
	}
}

// ServeHTTP serves every request with the security headers, and refuses a
// state-changing one from another origin.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// Not no-referrer: under it a browser sends "Origin: null" with a
	// form's POST, and sameOrigin could not tell the console's own forms.
	// Cluster and machine names in paths still never leave this origin.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
		http.Error(w, "refused: a state-changing request must come from this console's own pages", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, withBrowser(r))
}

// sameOrigin reports whether a request was sent by a page of this host:
// its Origin (or, without one, its Sec-Fetch-Site) says so.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Scheme == "https" && u.Host == r.Host
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// validCSRF reports whether r's form carries want.
func validCSRF(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf")
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// signedInHandler serves a signed-in person's request.
type signedInHandler func(w http.ResponseWriter, r *http.Request, se *session)

// signedIn passes a request on with its session, renewed when due; without
// one it sends the browser to sign in. A state-changing request also needs
// the session's CSRF token.
func (s *Server) signedIn(next signedInHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		se := s.sessions.get(r, s.now())
		if se == nil {
			s.toLogin(w, r, "")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !validCSRF(r, se.csrf) {
				http.Error(w, "refused: the form's CSRF token does not match your session; reload the page", http.StatusForbidden)
				return
			}
		}
		if !s.now().Before(se.renewAt) {
			if se = s.renewed(w, r, se); se == nil {
				return
			}
		}
		next(w, r, se)
	})
}

// renewed renews a session that is due, or sends the browser to sign in
// (nil). One renewal of a session runs at a time, since a refresh token
// may be used once: whoever waited uses what the first one renewed.
func (s *Server) renewed(w http.ResponseWriter, r *http.Request, se *session) *session {
	unlock := s.sessions.lockRenewal(se.id)
	defer unlock()
	if se = s.sessions.get(r, s.now()); se == nil {
		s.toLogin(w, r, "")
		return nil
	}
	if s.now().Before(se.renewAt) {
		return se
	}
	as, err := s.renew(r.Context(), se)
	if err == nil && as.who.User != se.who.User {
		err = &errSignIn{msg: "the renewed sign-in names someone else"}
	}
	if err != nil {
		s.sessions.end(se.id)
		var refused *errSignIn
		msg := "your sign-in could not be renewed; sign in again"
		if errors.As(err, &refused) {
			msg = "your sign-in ended: " + refused.msg
		} else {
			klog.InfoS("renewing a session failed", "user", se.who.User, "err", err)
		}
		s.toLogin(w, r, msg)
		return nil
	}
	s.sessions.update(se.id, as)
	se.signedInAs = as
	return se
}

// toLogin sends the browser to the sign-in page.
func (s *Server) toLogin(w http.ResponseWriter, r *http.Request, msg string) {
	http.SetCookie(w, cookie(sessionCookie, "", time.Time{}))
	if msg != "" {
		s.renderLogin(w, r, http.StatusUnauthorized, msg)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if se := s.sessions.get(r, s.now()); se != nil {
		http.Redirect(w, r, "/clusters", http.StatusSeeOther)
		return
	}
	s.renderLogin(w, r, http.StatusOK, "")
}

// renderLogin shows the sign-in form with a fresh CSRF token, which the
// form and a cookie both carry (there is no session to keep it in yet).
func (s *Server) renderLogin(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	token := randomToken()
	http.SetCookie(w, cookie(loginCookie, token, s.now().Add(time.Hour)))
	data := map[string]any{"CSRF": token, "Error": msg}
	if s.oidc != nil {
		data["Provider"] = s.oidc.opts.Name
	}
	s.render(w, status, "login", data)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	c, err := r.Cookie(loginCookie)
	if err != nil || !validCSRF(r, c.Value) {
		http.Error(w, "refused: the sign-in form's CSRF token does not match; reload the page", http.StatusForbidden)
		return
	}
	user, password := strings.TrimSpace(r.PostFormValue("username")), r.PostFormValue("password")
	if wait := s.signIns.Take(s.now(), browserOf(r.Context())); wait > 0 {
		klog.InfoS("A sign-in refused over this browser's rate limit", "user", user, "browser", browserOf(r.Context()), "retryAfter", wait)
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second).Seconds())+1))
		s.renderLogin(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many sign-in attempts from your address; try again in %s", wait.Round(time.Second)))
		return
	}
	as, err := s.signIn(r.Context(), user, password)
	if err != nil {
		var refused *errSignIn
		msg := "sign-in is unavailable right now; try again"
		if errors.As(err, &refused) {
			msg = refused.msg
		} else {
			klog.InfoS("a sign-in failed", "user", user, "err", err)
		}
		s.renderLogin(w, r, http.StatusUnauthorized, msg)
		return
	}
	se := s.sessions.start(as, false, s.now().Add(s.opts.SessionLifetime))
	http.SetCookie(w, cookie(loginCookie, "", time.Time{}))
	http.SetCookie(w, cookie(sessionCookie, se.id, se.expires))
	klog.InfoS("signed in", "user", as.who.User, "groups", as.who.Groups)
	http.Redirect(w, r, "/clusters", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, se *session) {
	s.sessions.end(se.id)
	switch {
	case se.refresh == "":
	case se.viaOIDC:
		s.oidcRevoke(r.Context(), se.refresh)
	default:
		s.revoke(r.Context(), se.refresh)
	}
	http.SetCookie(w, cookie(sessionCookie, "", time.Time{}))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// revoke ends the issuer's session of a refresh token, best effort: the
// console's session is gone either way.
func (s *Server) revoke(ctx context.Context, refresh string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.IssuerURL+issuer.RevokePath, strings.NewReader(url.Values{"token": {refresh}}.Encode()))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	forBrowser(req)
	if resp, err := s.issuerClient.Do(req); err == nil {
		_ = resp.Body.Close()
	}
}

// render writes a page.
func (s *Server) render(w http.ResponseWriter, status int, page string, data map[string]any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := s.pages[page].Execute(w, data); err != nil {
		klog.InfoS("rendering a page failed", "page", page, "err", err)
	}
}
