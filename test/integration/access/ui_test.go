package access

import (
	"context"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	authcmd "ichor.dev/ichor/pkg/cmd/auth"
	uicmd "ichor.dev/ichor/pkg/cmd/ui"
	"ichor.dev/ichor/pkg/issuer"
	"ichor.dev/ichor/pkg/pki"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

// TestConsole: ichor-ui over HTTPS with its security headers; a person signs
// in with an Ichor user's password and the console acts as them, with their
// own token (ichor-apiserver's audit names the person, never ichor-ui);
// what it refuses (another origin, a missing CSRF token, a forged session,
// a wrong password); sign-out; a disabled user locked out within a token
// lifetime. No answer carries a token or the password.
func TestConsole(t *testing.T) {
	ctx := t.Context()
	ns := itest.CP.Namespace(t)
	itest.UseUsersEnabled(ctx, t, true)
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	name := func(n string) string { return n + "-" + ns }
	passwords := map[string]string{}
	for _, u := range []struct {
		name string
		role v1alpha1.UserRole
	}{{"dana", v1alpha1.UserRoleOperator}, {"vic", v1alpha1.UserRoleViewer}} {
		passwords[u.name] = "correct horse battery " + u.name
		itest.CreateUser(ctx, t, name(u.name), v1alpha1.IchorUserSpec{Role: u.role}, passwords[u.name])
	}
	if _, err := itest.APIClient(t).IchorV1alpha1().TalosClusters(ns).Create(ctx, itest.APITalosCluster("prod", ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	itest.RunAuth(t, func(o *authcmd.Options) { o.TokenLifetime = itest.TokenLifetime })
	itest.WaitIssuerTrusted(t, name("vic"), passwords["vic"])
	newBrowser := itest.RunUI(t).NewBrowser
	dana, vic := name("dana"), name("vic")
	var answers []itest.Page
	keep := func(p itest.Page) itest.Page { answers = append(answers, p); return p }

	t.Run("every answer is HTTPS-only, unframeable and uncached, with a strict CSP", func(t *testing.T) {
		b := newBrowser()
		for _, path := range []string{"/login", "/clusters", "/static/ui.css", "/nowhere"} {
			p := keep(b.Get(t, path))
			for header, want := range map[string]string{
				"Strict-Transport-Security": "max-age=31536000; includeSubDomains",
				"X-Content-Type-Options":    "nosniff",
				"X-Frame-Options":           "DENY",
				"Cache-Control":             "no-store",
				"Referrer-Policy":           "same-origin",
			} {
				if got := p.Header.Get(header); got != want {
					t.Errorf("GET %s: %s %q, want %q", path, header, got, want)
				}
			}
			csp := p.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"} {
				if !strings.Contains(csp, directive) {
					t.Errorf("GET %s: CSP %q lacks %q", path, csp, directive)
				}
			}
			if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
				t.Errorf("GET %s: CSP %q allows inline code or another origin", path, csp)
			}
		}
		if p := b.Get(t, "/clusters"); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/login" {
			t.Errorf("GET /clusters without a session: %d to %q, want a redirect to /login", p.Status, p.Header.Get("Location"))
		}
	})

	t.Run("an operator signs in and sees the clusters as herself", func(t *testing.T) {
		b := newBrowser()
		login := keep(b.Get(t, "/login"))
		var loginCookie *http.Cookie
		for _, c := range (&http.Response{Header: login.Header}).Cookies() {
			if c.Name == "__Host-ichor-ui-login" {
				loginCookie = c
			}
		}
		if loginCookie == nil || !loginCookie.HttpOnly || !loginCookie.Secure || loginCookie.SameSite != http.SameSiteStrictMode || loginCookie.Path != "/" {
			t.Errorf("the sign-in form's cookie: %+v", loginCookie)
		}
		p := keep(b.Post(t, "/login", url.Values{"csrf": {login.Csrf(t)}, "username": {dana}, "password": {passwords["dana"]}}))
		if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/clusters" {
			t.Fatalf("sign-in: %d %q\n%s", p.Status, p.Header.Get("Location"), p.Body)
		}
		var session *http.Cookie
		for _, c := range (&http.Response{Header: p.Header}).Cookies() {
			if c.Name == "__Host-ichor-ui" {
				session = c
			}
		}
		if session == nil || !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || session.Domain != "" {
			t.Fatalf("the session cookie: %+v", session)
		}
		clusters := keep(b.Get(t, "/clusters"))
		if clusters.Status != http.StatusOK || !strings.Contains(clusters.Body, "ichor:"+dana) || !strings.Contains(clusters.Body, `/clusters/`+ns+`/prod">prod</a>`) {
			t.Fatalf("the clusters page: %d\n%s", clusters.Status, clusters.Body)
		}
		// ichor-apiserver saw the person, not ichor-ui.
		var asDana bool
		for _, e := range itest.AuditEvents(t) {
			if e.ObjectRef.Resource != "talosclusters" || e.Verb != "list" {
				continue
			}
			if e.User.Username == itest.UIUser {
				t.Errorf("ichor-apiserver's audit names ichor-ui for a list of clusters: %s", e.Raw)
			}
			asDana = asDana || e.User.Username == "ichor:"+dana
		}
		if !asDana {
			t.Error("ichor-apiserver's audit has no list of clusters by ichor:" + dana)
		}

		// Sign-out needs the session's CSRF token; then the session is gone.
		if p := keep(b.Post(t, "/logout", url.Values{})); p.Status != http.StatusForbidden || !strings.Contains(p.Body, "CSRF") {
			t.Errorf("sign-out without the CSRF token: %d %s", p.Status, p.Body)
		}
		if p := keep(b.Post(t, "/logout", url.Values{"csrf": {clusters.Csrf(t)}})); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/login" {
			t.Errorf("sign-out: %d %q", p.Status, p.Header.Get("Location"))
		}
		// The old cookie, presented again, is no session.
		again := newBrowser()
		u, _ := url.Parse(again.Base)
		again.Client.Jar.SetCookies(u, []*http.Cookie{{Name: "__Host-ichor-ui", Value: session.Value, Path: "/", Secure: true}})
		if p := again.Get(t, "/clusters"); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/login" {
			t.Errorf("the session cookie after sign-out: %d to %q", p.Status, p.Header.Get("Location"))
		}
	})

	t.Run("what a forger or another site tries is refused", func(t *testing.T) {
		b := newBrowser()
		u, _ := url.Parse(b.Base)
		b.Client.Jar.SetCookies(u, []*http.Cookie{{Name: "__Host-ichor-ui", Value: "forged-session-id", Path: "/", Secure: true}})
		if p := keep(b.Get(t, "/clusters")); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/login" {
			t.Errorf("a forged session: %d to %q", p.Status, p.Header.Get("Location"))
		}
		login := b.Get(t, "/login")
		form := url.Values{"csrf": {login.Csrf(t)}, "username": {dana}, "password": {passwords["dana"]}}
		if p := keep(b.Do(t, http.MethodPost, "/login", form, "https://evil.example")); p.Status != http.StatusForbidden {
			t.Errorf("a sign-in posted from another origin: %d", p.Status)
		}
		if p := keep(b.Do(t, http.MethodPost, "/login", form, "")); p.Status != http.StatusForbidden {
			t.Errorf("a sign-in posted without an Origin: %d", p.Status)
		}
		if p := keep(b.Post(t, "/login", url.Values{"csrf": {"guessed"}, "username": {dana}, "password": {passwords["dana"]}})); p.Status != http.StatusForbidden {
			t.Errorf("a sign-in with a wrong CSRF token: %d", p.Status)
		}
		wrong := keep(b.Post(t, "/login", url.Values{"csrf": {b.Get(t, "/login").Csrf(t)}, "username": {dana}, "password": {"not the password"}}))
		if wrong.Status != http.StatusUnauthorized || !strings.Contains(wrong.Body, `role="alert"`) || strings.Contains(strings.Join(wrong.Header.Values("Set-Cookie"), ";"), "__Host-ichor-ui=") {
			t.Errorf("a wrong password: %d, cookies %v\n%s", wrong.Status, wrong.Header.Values("Set-Cookie"), wrong.Body)
		}
	})

	t.Run("an operator approves a worker beside its pinned fingerprint; a viewer is offered nothing and refused", func(t *testing.T) {
		m := itest.PinnedMachineOf(t, ns, "m1", v1alpha1.MachineRoleWorker)
		path := "/clusters/" + ns + "/prod"
		action := path + "/machines/" + m.Name + "/approval"

		viewer := newBrowser()
		page := keep(viewer.SignIn(t, vic, passwords["vic"]))
		page = keep(viewer.Get(t, path))
		if page.Status != http.StatusOK || !strings.Contains(html.UnescapeString(page.Body), m.Status.Maintenance.CertificateFingerprint) || !strings.Contains(page.Body, "pending") {
			t.Fatalf("the viewer's cluster page: %d\n%s", page.Status, page.Body)
		}
		if strings.Contains(page.Body, `value="Approved"`) {
			t.Error("a viewer is offered to approve")
		}
		refused := keep(viewer.Post(t, action, url.Values{"csrf": {page.Csrf(t)}, "decision": {"Approved"}}))
		if refused.Status != http.StatusForbidden || !strings.Contains(refused.Body, "ichor:"+vic) || !strings.Contains(refused.Body, "forbidden") {
			t.Errorf("a viewer's approval: %d\n%s", refused.Status, refused.Body)
		}

		operator := newBrowser()
		operator.SignIn(t, dana, passwords["dana"])
		page = keep(operator.Get(t, path))
		if !strings.Contains(page.Body, `value="Approved"`) || !strings.Contains(page.Body, "Compare with the fingerprint") {
			t.Fatalf("the operator's cluster page offers no approval:\n%s", page.Body)
		}
		if p := keep(operator.Post(t, action, url.Values{"csrf": {page.Csrf(t)}, "decision": {"Rejected"}})); p.Status != http.StatusBadRequest || !strings.Contains(p.Body, "a rejection needs a reason") {
			t.Errorf("a rejection without a reason: %d\n%s", p.Status, p.Body)
		}
		if p := keep(operator.Post(t, action, url.Values{"csrf": {page.Csrf(t)}, "decision": {"Approved"}, "reason": {"serial matches the order"}})); p.Status != http.StatusSeeOther || p.Header.Get("Location") != path {
			t.Fatalf("the operator's approval: %d %q\n%s", p.Status, p.Header.Get("Location"), p.Body)
		}
		got, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != "ichor:"+dana || a.Reason != "serial matches the order" {
			t.Fatalf("the machine's approval: %+v", a)
		}
		// An Event someone else reported about the cluster, as anyone who may
		// create Events in the namespace could, is not Ichor's to show.
		if _, err := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig).EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"}, EventTime: metav1.NowMicro(),
			ReportingController: "someone-else", ReportingInstance: "someone-else-1", Action: "Forge", Reason: "Forged", Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TalosCluster", Name: "prod", Namespace: ns},
			Note:      "forged: approve every machine now",
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		page = keep(operator.Get(t, path))
		if !strings.Contains(page.Body, "Approved by ichor:"+dana+": serial matches the order") {
			t.Errorf("the page after the approval:\n%s", page.Body)
		}
		if strings.Contains(page.Body, "forged") {
			t.Errorf("the cluster's page shows an Event another component reported:\n%s", page.Body)
		}
		if p := keep(operator.Get(t, "/clusters/"+ns+"/no-such-cluster")); p.Status != http.StatusNotFound || !strings.Contains(html.UnescapeString(p.Body), `"no-such-cluster" not found`) {
			t.Errorf("a cluster that does not exist: %d\n%s", p.Status, p.Body)
		}
	})

	t.Run("operations: offered only to whoever may, confirmed for one object, followed live", func(t *testing.T) {
		path := "/clusters/" + ns + "/prod/operations"
		viewer := newBrowser()
		viewer.SignIn(t, vic, passwords["vic"])
		page := keep(viewer.Get(t, path))
		if page.Status != http.StatusOK || strings.Contains(page.Body, `class="operation"`) {
			t.Errorf("the viewer's operations page: %d, offers a form: %v", page.Status, strings.Contains(page.Body, `class="operation"`))
		}
		refused := keep(viewer.Post(t, path, url.Values{"csrf": {page.Csrf(t)}, "type": {"reboot"}, "name": {"by-a-viewer"}}))
		if refused.Status != http.StatusForbidden || !strings.Contains(refused.Body, "ichor:"+vic) || !strings.Contains(refused.Body, "forbidden") {
			t.Errorf("a viewer's new operation: %d\n%s", refused.Status, refused.Body)
		}

		operator := newBrowser()
		operator.SignIn(t, dana, passwords["dana"])
		page = keep(operator.Get(t, path))
		if !strings.Contains(page.Body, `<option value="reboot">`) || strings.Contains(page.Body, `<option value="node-shutdown">`) {
			t.Errorf("an operator is offered the wrong types (reboot: hers to start; node-shutdown: an admin's):\n%s", page.Body)
		}
		csrf := page.Csrf(t)
		if p := keep(operator.Post(t, path, url.Values{"csrf": {csrf}, "type": {"format-c"}})); p.Status != http.StatusBadRequest || !strings.Contains(html.UnescapeString(p.Body), `type "format-c"`) {
			t.Errorf("an operation of no type: %d\n%s", p.Status, p.Body)
		}
		if p := keep(operator.Post(t, path, url.Values{"csrf": {csrf}, "type": {"talos-upgrade"}, "name": {"no-version"}})); p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Body, "spec.talosUpgrade.version") {
			t.Errorf("an upgrade without a version: %d\n%s", p.Status, p.Body)
		}
		p := keep(operator.Post(t, path, url.Values{"csrf": {csrf}, "type": {"reboot"}, "name": {"r1"}, "machines": {"m1"}}))
		if p.Status != http.StatusSeeOther || p.Header.Get("Location") != path+"/r1" {
			t.Fatalf("an operator's new reboot: %d %q\n%s", p.Status, p.Header.Get("Location"), p.Body)
		}
		confirm := keep(operator.Get(t, path+"/r1/start"))
		if !strings.Contains(confirm.Body, "Starting it reboots m1 of cluster prod, one machine at a time.") {
			t.Errorf("the confirmation:\n%s", confirm.Body)
		}
		uid := regexp.MustCompile(`name="uid" value="([^"]+)"`).FindStringSubmatch(confirm.Body)
		if uid == nil {
			t.Fatalf("the confirmation carries no UID:\n%s", confirm.Body)
		}
		if p := keep(operator.Post(t, path+"/r1/start", url.Values{"csrf": {csrf}, "uid": {"another-object"}})); p.Status != http.StatusConflict {
			t.Errorf("a start confirmed for another object: %d\n%s", p.Status, p.Body)
		}
		if p := keep(operator.Post(t, path+"/r1/start", url.Values{"csrf": {csrf}, "uid": {uid[1]}})); p.Status != http.StatusSeeOther {
			t.Fatalf("the confirmed start: %d\n%s", p.Status, p.Body)
		}
		op, err := itest.APIClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "r1", metav1.GetOptions{})
		if err != nil || op.Status.StartedBy != "ichor:"+dana {
			t.Fatalf("r1 after the start: %v, started by %q", err, op.Status.StartedBy)
		}

		// An admin's type: the operator may create it, not start it; the
		// typed name is asked first, then the server refuses, saying why.
		if p := keep(operator.Post(t, path, url.Values{"csrf": {csrf}, "type": {"node-shutdown"}, "name": {"off"}, "machines": {"m1"}})); p.Status != http.StatusSeeOther {
			t.Fatalf("an operator's new node-shutdown: %d\n%s", p.Status, p.Body)
		}
		confirm = keep(operator.Get(t, path+"/off/start"))
		if strings.Contains(confirm.Body, `class="start"`) {
			t.Errorf("an operator is offered to start a node-shutdown:\n%s", confirm.Body)
		}
		off, err := itest.APIClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "off", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := keep(operator.Post(t, path+"/off/start", url.Values{"csrf": {csrf}, "uid": {string(off.UID)}})); p.Status != http.StatusBadRequest || !strings.Contains(p.Body, "type the cluster") {
			t.Errorf("a node-shutdown without the typed name: %d\n%s", p.Status, p.Body)
		}
		p = keep(operator.Post(t, path+"/off/start", url.Values{"csrf": {csrf}, "uid": {string(off.UID)}, "confirm": {"prod"}}))
		if p.Status != http.StatusForbidden || !strings.Contains(html.UnescapeString(p.Body), `it needs the "start" verb on resource "talosoperations", subresource "node-shutdown"`) {
			t.Errorf("an operator's start of a node-shutdown: %d\n%s", p.Status, p.Body)
		}

		// The live stream sends the operation as it is, as the person.
		first := operator.FirstEvent(t, path+"/r1/live")
		if !strings.HasPrefix(first, "event: progress\n") || !strings.Contains(first, "started by ichor:"+dana) {
			t.Errorf("the live stream's first event:\n%s", first)
		}
		if p := keep(newBrowser().Get(t, path+"/r1/live")); p.Status != http.StatusSeeOther {
			t.Errorf("the live stream without a session: %d", p.Status)
		}
	})

	t.Run("a disabled user is signed out within a token lifetime", func(t *testing.T) {
		b := newBrowser()
		if p := keep(b.SignIn(t, vic, passwords["vic"])); !strings.Contains(p.Body, "ichor:"+vic) {
			t.Fatalf("the viewer's clusters page:\n%s", p.Body)
		}
		u, err := users.Get(ctx, vic, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Spec.Disabled = true
		if _, err := users.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var last itest.Page
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*itest.TokenLifetime, true, func(context.Context) (bool, error) {
			last = b.Get(t, "/clusters")
			return last.Status != http.StatusOK, nil
		})
		if err != nil || last.Status != http.StatusUnauthorized || !strings.Contains(last.Body, "your sign-in ended") {
			t.Fatalf("the disabled viewer's session: %v, %d\n%s", err, last.Status, last.Body)
		}
		keep(last)
	})

	for _, p := range answers {
		all := p.Body + strings.Join(p.Header.Values("Set-Cookie"), "\n")
		if itest.JWTLike.MatchString(all) {
			t.Errorf("an answer carries something shaped like a token: %s", itest.JWTLike.FindString(all))
		}
		if strings.Contains(all, "PRIVATE KEY") || strings.Contains(all, "BEGIN CERTIFICATE") {
			t.Error("an answer carries a key or a certificate")
		}
		for _, pw := range passwords {
			if strings.Contains(all, pw) {
				t.Error("an answer carries a password")
			}
		}
	}
}

// TestConsoleServiceAccountActsAsNoOne: what an attacker holding a token of
// ichor-ui's ServiceAccount (a stolen pod, a token requested for it) would
// try against kube-apiserver directly: act as the controller (a secrets
// bundle), as ichor-auth (its signing keys), as an admin person or group,
// or as itself. ichor-ui has no right of its own, so each is refused.
func TestConsoleServiceAccountActsAsNoOne(t *testing.T) {
	ctx := t.Context()
	itest.InstallUI(ctx, t)
	itest.InstallControllerRBAC(ctx, t)
	itest.InstallAuth(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	kube := func(cfg *rest.Config) kubernetes.Interface { return kubernetes.NewForConfigOrDie(cfg) }
	// A real token of the ServiceAccount, as kube-apiserver issues them.
	tr, err := kube(itest.CP.AdminConfig).CoreV1().ServiceAccounts(harness.IchorNamespace).CreateToken(ctx, "ichor-ui",
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		as   rest.ImpersonationConfig
		try  func(*rest.Config) error
	}{
		{"as the controller, read a secrets bundle", rest.ImpersonationConfig{UserName: itest.ControllerUser},
			func(cfg *rest.Config) error {
				_, err := kube(cfg).CoreV1().Secrets(ns).Get(ctx, "prod-secrets", metav1.GetOptions{})
				return err
			}},
		{"as ichor-auth, read its signing keys", rest.ImpersonationConfig{UserName: itest.AuthUser},
			func(cfg *rest.Config) error {
				_, err := kube(cfg).CoreV1().Secrets(harness.IchorNamespace).Get(ctx, "ichor-auth-keys", metav1.GetOptions{})
				return err
			}},
		{"as an Ichor admin, list clusters", rest.ImpersonationConfig{UserName: "ichor:carol", Groups: []string{"ichor:admin"}},
			func(cfg *rest.Config) error {
				_, err := itest.APIClientFor(t, cfg).IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{})
				return err
			}},
		{"as itself, list clusters", rest.ImpersonationConfig{},
			func(cfg *rest.Config) error {
				_, err := itest.APIClientFor(t, cfg).IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{})
				return err
			}},
	} {
		cfg := rest.AnonymousClientConfig(itest.CP.AdminConfig)
		cfg.BearerToken, cfg.Impersonate = tr.Status.Token, c.as
		// NotFound would mean the read was allowed.
		if err := c.try(cfg); !apierrors.IsForbidden(err) {
			t.Errorf("ichor-ui's ServiceAccount %s: want Forbidden, got %v", c.name, err)
		}
	}
}

// TestConsoleSignInLimitsArePerBrowser: every console sign-in reaches
// ichor-auth from the console's one address, so an unauthenticated client
// guessing passwords through the console, from a few addresses, would use
// up ichor-auth's limit of that address and lock everyone out of console
// sign-in. The console limits each browser itself, and names the browser
// to ichor-auth over a connection only it can make (its trusted-proxy
// client certificate), so ichor-auth counts browsers apart; a client that
// names an address without that certificate is counted as itself.
func TestConsoleSignInLimitsArePerBrowser(t *testing.T) {
	ctx := t.Context()
	itest.UseUsersEnabled(ctx, t, true)
	name := "lim-" + itest.CP.Namespace(t)
	itest.CreateUser(ctx, t, name, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, "a long enough passphrase")
	ca, err := pki.NewCA("ichor-ui-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "proxy-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.Leaf{CommonName: "ichor-ui", Usage: pki.ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := kp.WriteFiles(dir, "ichor-ui-client")
	if err != nil {
		t.Fatal(err)
	}
	itest.RunAuth(t, func(o *authcmd.Options) { o.TokenLifetime = itest.TokenLifetime; o.TrustedProxyCAFile = caFile })
	itest.WaitIssuerTrusted(t, name, "a long enough passphrase")
	ui := itest.RunUI(t, func(o *uicmd.Options) { o.IssuerClientCertFile, o.IssuerClientKeyFile = certFile, keyFile })

	from := func(addr string) *itest.Browser {
		b := ui.NewBrowser()
		b.Client.Transport.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}).DialContext
		return b
	}
	// Three guessers, 9 wrong guesses each for users that do not exist, all
	// at once: more than ichor-auth lets one address try (20), fewer than the
	// console lets one browser (10).
	type guess struct {
		b    *itest.Browser
		form url.Values
	}
	var guesses []guess
	for i, addr := range []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"} {
		for j := range 9 {
			b := from(addr)
			login := b.Get(t, "/login")
			guesses = append(guesses, guess{b, url.Values{"csrf": {login.Csrf(t)}, "username": {fmt.Sprintf("nobody-%d-%d", i, j)}, "password": {"guess"}}})
		}
	}
	answers := make([]itest.Page, len(guesses))
	var wg sync.WaitGroup
	for i, g := range guesses {
		wg.Go(func() { answers[i] = g.b.Post(t, "/login", g.form) })
	}
	wg.Wait()
	for i, p := range answers {
		if p.Status != http.StatusUnauthorized || strings.Contains(p.Body, "too many") {
			t.Errorf("guess %d: %d, want 401 for a wrong password, not a limit\n%s", i, p.Status, p.Body)
		}
	}
	// Someone else signs in at once.
	from("127.0.0.64").SignIn(t, name, "a long enough passphrase")

	// One browser past the console's own limit is told to wait.
	b := from("127.0.0.61")
	var last itest.Page
	for range itest.SignInBurst + 1 {
		login := b.Get(t, "/login")
		if last = b.Post(t, "/login", url.Values{"csrf": {login.Csrf(t)}, "username": {"nobody"}, "password": {"guess"}}); last.Status == http.StatusTooManyRequests {
			break
		}
	}
	if last.Status != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" || !strings.Contains(last.Body, "too many sign-in attempts") {
		t.Errorf("a browser past its limit: %d %q\n%s", last.Status, last.Header.Get("Retry-After"), last.Body)
	}

	// Without the console's certificate, naming another address counts as
	// the connection's own: 30 guesses at once from one client, each
	// claiming an address of its own, are limited.
	client := itest.IssuerHTTPClient(t)
	codes := make([]int, 30)
	for i := range codes {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, itest.CP.Auth.URL+issuer.TokenPath, strings.NewReader(url.Values{
				"grant_type": {"password"}, "username": {fmt.Sprintf("forger-%d", i)}, "password": {"guess"}}.Encode()))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set(issuer.ClientAddressHeader, fmt.Sprintf("10.9.9.%d", i+1))
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	if !slices.Contains(codes, http.StatusTooManyRequests) {
		t.Errorf("a client without the console's certificate named 30 addresses at once and was never limited: %v", codes)
	}
}
