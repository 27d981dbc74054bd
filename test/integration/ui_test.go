package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
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
)

// ichor-ui's ServiceAccount, as artifacts/ui-serviceaccount.yaml names it.
var (
	uiUser   = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-ui"
	uiGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}
)

// installUI applies artifacts/ui-serviceaccount.yaml, as an installation does.
func installUI(ctx context.Context, t testing.TB) {
	t.Helper()
	installArtifacts(ctx, t, "ui-serviceaccount.yaml")
}

// browser is what a person's browser is to ichor-ui: cookies, and the
// console's serving CA trusted. It follows no redirect, so that tests see
// where they lead.
type browser struct {
	base   string
	client *http.Client
}

// console is an ichor-ui this test started.
type console struct {
	base string
	pool *x509.CertPool
	// spki is the base64 SHA-256 of its serving certificate's public key,
	// which a real browser is told to trust (and nothing else).
	spki string
}

// runUI starts ichor-ui in this process with its artifacts and tune's
// changes to its options, and with no credential of its own: it knows
// where kube-apiserver is and its CA, nothing else.
func runUI(t *testing.T, tune ...func(*uicmd.Options)) *console {
	t.Helper()
	installUI(t.Context(), t)
	ca, err := pki.NewCA("ichor-ui-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.Leaf{CommonName: "ichor-ui", DNSNames: pki.Loopback.DNSNames, IPs: pki.Loopback.IPs, Usage: pki.ServerAuth})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := kp.WriteFiles(t.TempDir(), "ichor-ui")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kp.CertPEM)
	if block == nil {
		t.Fatal("ichor-ui's certificate is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	o := uicmd.NewOptions()
	o.TLSCertFile, o.TLSKeyFile = certFile, keyFile
	o.IssuerURL, o.IssuerCAFile = cp.Auth.URL, cp.Auth.CAFile
	for _, f := range tune {
		f(o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.RunOn(ctx, rest.AnonymousClientConfig(cp.AdminConfig), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ichor-ui: %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	return &console{base: "https://" + ln.Addr().String(), pool: pool, spki: spkiHash(leaf)}
}

// spkiHash is the base64 SHA-256 of a certificate's public key, as
// Chromium's --ignore-certificate-errors-spki-list takes it.
func spkiHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// newBrowser is a fresh HTTP browser for the console.
func (c *console) newBrowser() *browser {
	jar, _ := cookiejar.New(nil) // never fails without options
	return &browser{base: c.base, client: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// page is an answer, read whole.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(t *testing.T, method, path string, form url.Values, origin string) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

func (b *browser) get(t *testing.T, path string) page { return b.do(t, http.MethodGet, path, nil, "") }

// post sends a form as the console's own pages do: from its origin.
func (b *browser) post(t *testing.T, path string, form url.Values) page {
	return b.do(t, http.MethodPost, path, form, b.base)
}

// firstEvent reads a server-sent event stream until its first event
// other than the retry field, and closes it.
func (b *browser) firstEvent(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var event strings.Builder
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" {
			if strings.HasPrefix(event.String(), "event: ") {
				return event.String()
			}
			event.Reset()
			continue
		}
		event.WriteString(line + "\n")
	}
	t.Fatalf("GET %s ended before an event: %v", path, scanner.Err())
	return ""
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of a page's form.
func (p page) csrf(t *testing.T) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", p.body)
	}
	return m[1]
}

// signIn signs a person in through the form and returns the clusters page.
func (b *browser) signIn(t *testing.T, user, password string) page {
	t.Helper()
	login := b.get(t, "/login")
	p := b.post(t, "/login", url.Values{"csrf": {login.csrf(t)}, "username": {user}, "password": {password}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/clusters" {
		t.Fatalf("sign-in of %s: %d %s\n%s", user, p.status, p.header.Get("Location"), p.body)
	}
	return b.get(t, "/clusters")
}

// waitIssuerTrusted waits until kube-apiserver accepts ichor-auth's
// tokens: its JWT authenticator looks for the issuer every few seconds
// until it first answers, which a freshly started ichor-auth may not have
// yet.
func waitIssuerTrusted(t *testing.T, user, password string) {
	t.Helper()
	code, body := passwordGrant(t.Context(), t, issuerHTTPClient(t), user, password)
	var tok struct {
		IDToken string `json:"id_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); err != nil || code != http.StatusOK || tok.IDToken == "" {
		t.Fatalf("sign-in of %s at ichor-auth: %d %s", user, code, body)
	}
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = reviewToken(ctx, tok.IDToken)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver does not accept ichor-auth's tokens: %v (last: %v)", err, last)
	}
}

// jwtLike is what a token (a JWT: base64url of a JSON header) looks like.
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}`)

// TestConsole: ichor-ui over HTTPS with its security headers; a person signs
// in with an Ichor user's password and the console acts as them, with their
// own token (ichor-apiserver's audit names the person, never ichor-ui);
// what it refuses (another origin, a missing CSRF token, a forged session,
// a wrong password); sign-out; a disabled user locked out within a token
// lifetime. No answer carries a token or the password.
func TestConsole(t *testing.T) {
	ctx := t.Context()
	ns := cp.Namespace(t)
	useUsersEnabled(ctx, t, true)
	users := apiClient(t).IchorV1alpha1().IchorUsers()
	name := func(n string) string { return n + "-" + ns }
	passwords := map[string]string{}
	for _, u := range []struct {
		name string
		role v1alpha1.UserRole
	}{{"dana", v1alpha1.UserRoleOperator}, {"vic", v1alpha1.UserRoleViewer}} {
		passwords[u.name] = "correct horse battery " + u.name
		createUser(ctx, t, name(u.name), v1alpha1.IchorUserSpec{Role: u.role}, passwords[u.name])
	}
	if _, err := apiClient(t).IchorV1alpha1().TalosClusters(ns).Create(ctx, apiTalosCluster("prod", ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	runAuth(t, func(o *authcmd.Options) { o.TokenLifetime = tokenLifetime })
	waitIssuerTrusted(t, name("vic"), passwords["vic"])
	newBrowser := runUI(t).newBrowser
	dana, vic := name("dana"), name("vic")
	var answers []page
	keep := func(p page) page { answers = append(answers, p); return p }

	t.Run("every answer is HTTPS-only, unframeable and uncached, with a strict CSP", func(t *testing.T) {
		b := newBrowser()
		for _, path := range []string{"/login", "/clusters", "/static/ui.css", "/nowhere"} {
			p := keep(b.get(t, path))
			for header, want := range map[string]string{
				"Strict-Transport-Security": "max-age=31536000; includeSubDomains",
				"X-Content-Type-Options":    "nosniff",
				"X-Frame-Options":           "DENY",
				"Cache-Control":             "no-store",
				"Referrer-Policy":           "same-origin",
			} {
				if got := p.header.Get(header); got != want {
					t.Errorf("GET %s: %s %q, want %q", path, header, got, want)
				}
			}
			csp := p.header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"} {
				if !strings.Contains(csp, directive) {
					t.Errorf("GET %s: CSP %q lacks %q", path, csp, directive)
				}
			}
			if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
				t.Errorf("GET %s: CSP %q allows inline code or another origin", path, csp)
			}
		}
		if p := b.get(t, "/clusters"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
			t.Errorf("GET /clusters without a session: %d to %q, want a redirect to /login", p.status, p.header.Get("Location"))
		}
	})

	t.Run("an operator signs in and sees the clusters as herself", func(t *testing.T) {
		b := newBrowser()
		login := keep(b.get(t, "/login"))
		var loginCookie *http.Cookie
		for _, c := range (&http.Response{Header: login.header}).Cookies() {
			if c.Name == "__Host-ichor-ui-login" {
				loginCookie = c
			}
		}
		if loginCookie == nil || !loginCookie.HttpOnly || !loginCookie.Secure || loginCookie.SameSite != http.SameSiteStrictMode || loginCookie.Path != "/" {
			t.Errorf("the sign-in form's cookie: %+v", loginCookie)
		}
		p := keep(b.post(t, "/login", url.Values{"csrf": {login.csrf(t)}, "username": {dana}, "password": {passwords["dana"]}}))
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/clusters" {
			t.Fatalf("sign-in: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
		}
		var session *http.Cookie
		for _, c := range (&http.Response{Header: p.header}).Cookies() {
			if c.Name == "__Host-ichor-ui" {
				session = c
			}
		}
		if session == nil || !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || session.Domain != "" {
			t.Fatalf("the session cookie: %+v", session)
		}
		clusters := keep(b.get(t, "/clusters"))
		if clusters.status != http.StatusOK || !strings.Contains(clusters.body, "ichor:"+dana) || !strings.Contains(clusters.body, `/clusters/`+ns+`/prod">prod</a>`) {
			t.Fatalf("the clusters page: %d\n%s", clusters.status, clusters.body)
		}
		// ichor-apiserver saw the person, not ichor-ui.
		var asDana bool
		for _, e := range auditEvents(t) {
			if e.ObjectRef.Resource != "talosclusters" || e.Verb != "list" {
				continue
			}
			if e.User.Username == uiUser {
				t.Errorf("ichor-apiserver's audit names ichor-ui for a list of clusters: %s", e.raw)
			}
			asDana = asDana || e.User.Username == "ichor:"+dana
		}
		if !asDana {
			t.Error("ichor-apiserver's audit has no list of clusters by ichor:" + dana)
		}

		// Sign-out needs the session's CSRF token; then the session is gone.
		if p := keep(b.post(t, "/logout", url.Values{})); p.status != http.StatusForbidden || !strings.Contains(p.body, "CSRF") {
			t.Errorf("sign-out without the CSRF token: %d %s", p.status, p.body)
		}
		if p := keep(b.post(t, "/logout", url.Values{"csrf": {clusters.csrf(t)}})); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
			t.Errorf("sign-out: %d %q", p.status, p.header.Get("Location"))
		}
		// The old cookie, presented again, is no session.
		again := newBrowser()
		u, _ := url.Parse(again.base)
		again.client.Jar.SetCookies(u, []*http.Cookie{{Name: "__Host-ichor-ui", Value: session.Value, Path: "/", Secure: true}})
		if p := again.get(t, "/clusters"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
			t.Errorf("the session cookie after sign-out: %d to %q", p.status, p.header.Get("Location"))
		}
	})

	t.Run("what a forger or another site tries is refused", func(t *testing.T) {
		b := newBrowser()
		u, _ := url.Parse(b.base)
		b.client.Jar.SetCookies(u, []*http.Cookie{{Name: "__Host-ichor-ui", Value: "forged-session-id", Path: "/", Secure: true}})
		if p := keep(b.get(t, "/clusters")); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
			t.Errorf("a forged session: %d to %q", p.status, p.header.Get("Location"))
		}
		login := b.get(t, "/login")
		form := url.Values{"csrf": {login.csrf(t)}, "username": {dana}, "password": {passwords["dana"]}}
		if p := keep(b.do(t, http.MethodPost, "/login", form, "https://evil.example")); p.status != http.StatusForbidden {
			t.Errorf("a sign-in posted from another origin: %d", p.status)
		}
		if p := keep(b.do(t, http.MethodPost, "/login", form, "")); p.status != http.StatusForbidden {
			t.Errorf("a sign-in posted without an Origin: %d", p.status)
		}
		if p := keep(b.post(t, "/login", url.Values{"csrf": {"guessed"}, "username": {dana}, "password": {passwords["dana"]}})); p.status != http.StatusForbidden {
			t.Errorf("a sign-in with a wrong CSRF token: %d", p.status)
		}
		wrong := keep(b.post(t, "/login", url.Values{"csrf": {b.get(t, "/login").csrf(t)}, "username": {dana}, "password": {"not the password"}}))
		if wrong.status != http.StatusUnauthorized || !strings.Contains(wrong.body, `role="alert"`) || strings.Contains(strings.Join(wrong.header.Values("Set-Cookie"), ";"), "__Host-ichor-ui=") {
			t.Errorf("a wrong password: %d, cookies %v\n%s", wrong.status, wrong.header.Values("Set-Cookie"), wrong.body)
		}
	})

	t.Run("an operator approves a worker beside its pinned fingerprint; a viewer is offered nothing and refused", func(t *testing.T) {
		m := pinnedMachineOf(t, ns, "m1", v1alpha1.MachineRoleWorker)
		path := "/clusters/" + ns + "/prod"
		action := path + "/machines/" + m.Name + "/approval"

		viewer := newBrowser()
		page := keep(viewer.signIn(t, vic, passwords["vic"]))
		page = keep(viewer.get(t, path))
		if page.status != http.StatusOK || !strings.Contains(html.UnescapeString(page.body), m.Status.Maintenance.CertificateFingerprint) || !strings.Contains(page.body, "pending") {
			t.Fatalf("the viewer's cluster page: %d\n%s", page.status, page.body)
		}
		if strings.Contains(page.body, `value="Approved"`) {
			t.Error("a viewer is offered to approve")
		}
		refused := keep(viewer.post(t, action, url.Values{"csrf": {page.csrf(t)}, "decision": {"Approved"}}))
		if refused.status != http.StatusForbidden || !strings.Contains(refused.body, "ichor:"+vic) || !strings.Contains(refused.body, "forbidden") {
			t.Errorf("a viewer's approval: %d\n%s", refused.status, refused.body)
		}

		operator := newBrowser()
		operator.signIn(t, dana, passwords["dana"])
		page = keep(operator.get(t, path))
		if !strings.Contains(page.body, `value="Approved"`) || !strings.Contains(page.body, "Compare with the fingerprint") {
			t.Fatalf("the operator's cluster page offers no approval:\n%s", page.body)
		}
		if p := keep(operator.post(t, action, url.Values{"csrf": {page.csrf(t)}, "decision": {"Rejected"}})); p.status != http.StatusBadRequest || !strings.Contains(p.body, "a rejection needs a reason") {
			t.Errorf("a rejection without a reason: %d\n%s", p.status, p.body)
		}
		if p := keep(operator.post(t, action, url.Values{"csrf": {page.csrf(t)}, "decision": {"Approved"}, "reason": {"serial matches the order"}})); p.status != http.StatusSeeOther || p.header.Get("Location") != path {
			t.Fatalf("the operator's approval: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
		}
		got, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != "ichor:"+dana || a.Reason != "serial matches the order" {
			t.Fatalf("the machine's approval: %+v", a)
		}
		// An Event someone else reported about the cluster, as anyone who may
		// create Events in the namespace could, is not Ichor's to show.
		if _, err := kubernetes.NewForConfigOrDie(cp.AdminConfig).EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"}, EventTime: metav1.NowMicro(),
			ReportingController: "someone-else", ReportingInstance: "someone-else-1", Action: "Forge", Reason: "Forged", Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TalosCluster", Name: "prod", Namespace: ns},
			Note:      "forged: approve every machine now",
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		page = keep(operator.get(t, path))
		if !strings.Contains(page.body, "Approved by ichor:"+dana+": serial matches the order") {
			t.Errorf("the page after the approval:\n%s", page.body)
		}
		if strings.Contains(page.body, "forged") {
			t.Errorf("the cluster's page shows an Event another component reported:\n%s", page.body)
		}
		if p := keep(operator.get(t, "/clusters/"+ns+"/no-such-cluster")); p.status != http.StatusNotFound || !strings.Contains(html.UnescapeString(p.body), `"no-such-cluster" not found`) {
			t.Errorf("a cluster that does not exist: %d\n%s", p.status, p.body)
		}
	})

	t.Run("operations: offered only to whoever may, confirmed for one object, followed live", func(t *testing.T) {
		path := "/clusters/" + ns + "/prod/operations"
		viewer := newBrowser()
		viewer.signIn(t, vic, passwords["vic"])
		page := keep(viewer.get(t, path))
		if page.status != http.StatusOK || strings.Contains(page.body, `class="operation"`) {
			t.Errorf("the viewer's operations page: %d, offers a form: %v", page.status, strings.Contains(page.body, `class="operation"`))
		}
		refused := keep(viewer.post(t, path, url.Values{"csrf": {page.csrf(t)}, "type": {"reboot"}, "name": {"by-a-viewer"}}))
		if refused.status != http.StatusForbidden || !strings.Contains(refused.body, "ichor:"+vic) || !strings.Contains(refused.body, "forbidden") {
			t.Errorf("a viewer's new operation: %d\n%s", refused.status, refused.body)
		}

		operator := newBrowser()
		operator.signIn(t, dana, passwords["dana"])
		page = keep(operator.get(t, path))
		if !strings.Contains(page.body, `<option value="reboot">`) || strings.Contains(page.body, `<option value="node-shutdown">`) {
			t.Errorf("an operator is offered the wrong types (reboot: hers to start; node-shutdown: an admin's):\n%s", page.body)
		}
		csrf := page.csrf(t)
		if p := keep(operator.post(t, path, url.Values{"csrf": {csrf}, "type": {"format-c"}})); p.status != http.StatusBadRequest || !strings.Contains(html.UnescapeString(p.body), `type "format-c"`) {
			t.Errorf("an operation of no type: %d\n%s", p.status, p.body)
		}
		if p := keep(operator.post(t, path, url.Values{"csrf": {csrf}, "type": {"talos-upgrade"}, "name": {"no-version"}})); p.status != http.StatusUnprocessableEntity || !strings.Contains(p.body, "spec.talosUpgrade.version") {
			t.Errorf("an upgrade without a version: %d\n%s", p.status, p.body)
		}
		p := keep(operator.post(t, path, url.Values{"csrf": {csrf}, "type": {"reboot"}, "name": {"r1"}, "machines": {"m1"}}))
		if p.status != http.StatusSeeOther || p.header.Get("Location") != path+"/r1" {
			t.Fatalf("an operator's new reboot: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
		}
		confirm := keep(operator.get(t, path+"/r1/start"))
		if !strings.Contains(confirm.body, "Starting it reboots m1 of cluster prod, one machine at a time.") {
			t.Errorf("the confirmation:\n%s", confirm.body)
		}
		uid := regexp.MustCompile(`name="uid" value="([^"]+)"`).FindStringSubmatch(confirm.body)
		if uid == nil {
			t.Fatalf("the confirmation carries no UID:\n%s", confirm.body)
		}
		if p := keep(operator.post(t, path+"/r1/start", url.Values{"csrf": {csrf}, "uid": {"another-object"}})); p.status != http.StatusConflict {
			t.Errorf("a start confirmed for another object: %d\n%s", p.status, p.body)
		}
		if p := keep(operator.post(t, path+"/r1/start", url.Values{"csrf": {csrf}, "uid": {uid[1]}})); p.status != http.StatusSeeOther {
			t.Fatalf("the confirmed start: %d\n%s", p.status, p.body)
		}
		op, err := apiClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "r1", metav1.GetOptions{})
		if err != nil || op.Status.StartedBy != "ichor:"+dana {
			t.Fatalf("r1 after the start: %v, started by %q", err, op.Status.StartedBy)
		}

		// An admin's type: the operator may create it, not start it; the
		// typed name is asked first, then the server refuses, saying why.
		if p := keep(operator.post(t, path, url.Values{"csrf": {csrf}, "type": {"node-shutdown"}, "name": {"off"}, "machines": {"m1"}})); p.status != http.StatusSeeOther {
			t.Fatalf("an operator's new node-shutdown: %d\n%s", p.status, p.body)
		}
		confirm = keep(operator.get(t, path+"/off/start"))
		if strings.Contains(confirm.body, `class="start"`) {
			t.Errorf("an operator is offered to start a node-shutdown:\n%s", confirm.body)
		}
		off, err := apiClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "off", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := keep(operator.post(t, path+"/off/start", url.Values{"csrf": {csrf}, "uid": {string(off.UID)}})); p.status != http.StatusBadRequest || !strings.Contains(p.body, "type the cluster") {
			t.Errorf("a node-shutdown without the typed name: %d\n%s", p.status, p.body)
		}
		p = keep(operator.post(t, path+"/off/start", url.Values{"csrf": {csrf}, "uid": {string(off.UID)}, "confirm": {"prod"}}))
		if p.status != http.StatusForbidden || !strings.Contains(html.UnescapeString(p.body), `it needs the "start" verb on resource "talosoperations", subresource "node-shutdown"`) {
			t.Errorf("an operator's start of a node-shutdown: %d\n%s", p.status, p.body)
		}

		// The live stream sends the operation as it is, as the person.
		first := operator.firstEvent(t, path+"/r1/live")
		if !strings.HasPrefix(first, "event: progress\n") || !strings.Contains(first, "started by ichor:"+dana) {
			t.Errorf("the live stream's first event:\n%s", first)
		}
		if p := keep(newBrowser().get(t, path+"/r1/live")); p.status != http.StatusSeeOther {
			t.Errorf("the live stream without a session: %d", p.status)
		}
	})

	t.Run("a disabled user is signed out within a token lifetime", func(t *testing.T) {
		b := newBrowser()
		if p := keep(b.signIn(t, vic, passwords["vic"])); !strings.Contains(p.body, "ichor:"+vic) {
			t.Fatalf("the viewer's clusters page:\n%s", p.body)
		}
		u, err := users.Get(ctx, vic, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Spec.Disabled = true
		if _, err := users.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var last page
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*tokenLifetime, true, func(context.Context) (bool, error) {
			last = b.get(t, "/clusters")
			return last.status != http.StatusOK, nil
		})
		if err != nil || last.status != http.StatusUnauthorized || !strings.Contains(last.body, "your sign-in ended") {
			t.Fatalf("the disabled viewer's session: %v, %d\n%s", err, last.status, last.body)
		}
		keep(last)
	})

	for _, p := range answers {
		all := p.body + strings.Join(p.header.Values("Set-Cookie"), "\n")
		if jwtLike.MatchString(all) {
			t.Errorf("an answer carries something shaped like a token: %s", jwtLike.FindString(all))
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
	installUI(ctx, t)
	installControllerRBAC(ctx, t)
	installAuth(ctx, t)
	ns := cp.Namespace(t)
	bindControllerSecrets(ctx, t, ns)
	kube := func(cfg *rest.Config) kubernetes.Interface { return kubernetes.NewForConfigOrDie(cfg) }
	// A real token of the ServiceAccount, as kube-apiserver issues them.
	tr, err := kube(cp.AdminConfig).CoreV1().ServiceAccounts(harness.IchorNamespace).CreateToken(ctx, "ichor-ui",
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		as   rest.ImpersonationConfig
		try  func(*rest.Config) error
	}{
		{"as the controller, read a secrets bundle", rest.ImpersonationConfig{UserName: controllerUser},
			func(cfg *rest.Config) error {
				_, err := kube(cfg).CoreV1().Secrets(ns).Get(ctx, "prod-secrets", metav1.GetOptions{})
				return err
			}},
		{"as ichor-auth, read its signing keys", rest.ImpersonationConfig{UserName: authUser},
			func(cfg *rest.Config) error {
				_, err := kube(cfg).CoreV1().Secrets(harness.IchorNamespace).Get(ctx, "ichor-auth-keys", metav1.GetOptions{})
				return err
			}},
		{"as an Ichor admin, list clusters", rest.ImpersonationConfig{UserName: "ichor:carol", Groups: []string{"ichor:admin"}},
			func(cfg *rest.Config) error {
				_, err := apiClientFor(t, cfg).IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{})
				return err
			}},
		{"as itself, list clusters", rest.ImpersonationConfig{},
			func(cfg *rest.Config) error {
				_, err := apiClientFor(t, cfg).IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{})
				return err
			}},
	} {
		cfg := rest.AnonymousClientConfig(cp.AdminConfig)
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
	useUsersEnabled(ctx, t, true)
	name := "lim-" + cp.Namespace(t)
	createUser(ctx, t, name, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, "a long enough passphrase")
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
	runAuth(t, func(o *authcmd.Options) { o.TokenLifetime = tokenLifetime; o.TrustedProxyCAFile = caFile })
	waitIssuerTrusted(t, name, "a long enough passphrase")
	ui := runUI(t, func(o *uicmd.Options) { o.IssuerClientCertFile, o.IssuerClientKeyFile = certFile, keyFile })

	from := func(addr string) *browser {
		b := ui.newBrowser()
		b.client.Transport.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}).DialContext
		return b
	}
	// Three guessers, 9 wrong guesses each for users that do not exist, all
	// at once: more than ichor-auth lets one address try (20), fewer than the
	// console lets one browser (10).
	type guess struct {
		b    *browser
		form url.Values
	}
	var guesses []guess
	for i, addr := range []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"} {
		for j := range 9 {
			b := from(addr)
			login := b.get(t, "/login")
			guesses = append(guesses, guess{b, url.Values{"csrf": {login.csrf(t)}, "username": {fmt.Sprintf("nobody-%d-%d", i, j)}, "password": {"guess"}}})
		}
	}
	answers := make([]page, len(guesses))
	var wg sync.WaitGroup
	for i, g := range guesses {
		wg.Go(func() { answers[i] = g.b.post(t, "/login", g.form) })
	}
	wg.Wait()
	for i, p := range answers {
		if p.status != http.StatusUnauthorized || strings.Contains(p.body, "too many") {
			t.Errorf("guess %d: %d, want 401 for a wrong password, not a limit\n%s", i, p.status, p.body)
		}
	}
	// Someone else signs in at once.
	from("127.0.0.64").signIn(t, name, "a long enough passphrase")

	// One browser past the console's own limit is told to wait.
	b := from("127.0.0.61")
	var last page
	for range signInBurst + 1 {
		login := b.get(t, "/login")
		if last = b.post(t, "/login", url.Values{"csrf": {login.csrf(t)}, "username": {"nobody"}, "password": {"guess"}}); last.status == http.StatusTooManyRequests {
			break
		}
	}
	if last.status != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" || !strings.Contains(last.body, "too many sign-in attempts") {
		t.Errorf("a browser past its limit: %d %q\n%s", last.status, last.header.Get("Retry-After"), last.body)
	}

	// Without the console's certificate, naming another address counts as
	// the connection's own: 30 guesses at once from one client, each
	// claiming an address of its own, are limited.
	client := issuerHTTPClient(t)
	codes := make([]int, 30)
	for i := range codes {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.Auth.URL+issuer.TokenPath, strings.NewReader(url.Values{
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

// signInBurst is the console's own limit of sign-ins per browser.
const signInBurst = 10
