package itest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	uicmd "ichor.dev/ichor/pkg/cmd/ui"
	"ichor.dev/ichor/pkg/pki"
	"ichor.dev/ichor/test/harness"
)

// ichor-ui's ServiceAccount, as artifacts/ui-serviceaccount.yaml names it.
var (
	UIUser   = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-ui"
	UIGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}
)

// InstallUI applies artifacts/ui-serviceaccount.yaml, as an installation does.
func InstallUI(ctx context.Context, t testing.TB) {
	t.Helper()
	InstallArtifacts(ctx, t, "ui-serviceaccount.yaml")
}

// Browser is what a person's browser is to ichor-ui: cookies, and the
// console's serving CA trusted. It follows no redirect, so that tests see
// where they lead.
type Browser struct {
	Base   string
	Client *http.Client
}

// Console is an ichor-ui this test started.
type Console struct {
	Base string
	Pool *x509.CertPool
	// SPKI is the base64 SHA-256 of its serving certificate's public key,
	// which a real browser is told to trust (and nothing else).
	SPKI string
}

// RunUI starts ichor-ui in this process with its artifacts and tune's
// changes to its options, and with no credential of its own: it knows
// where kube-apiserver is and its CA, nothing else.
func RunUI(t *testing.T, tune ...func(*uicmd.Options)) *Console {
	t.Helper()
	InstallUI(t.Context(), t)
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
	o.IssuerURL, o.IssuerCAFile = CP.Auth.URL, CP.Auth.CAFile
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
	go func() { done <- o.RunOn(ctx, rest.AnonymousClientConfig(CP.AdminConfig), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ichor-ui: %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	return &Console{Base: "https://" + ln.Addr().String(), Pool: pool, SPKI: SPKIHash(leaf)}
}

// SPKIHash is the base64 SHA-256 of a certificate's public key, as
// Chromium's --ignore-certificate-errors-spki-list takes it.
func SPKIHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// NewBrowser is a fresh HTTP browser for the console.
func (c *Console) NewBrowser() *Browser {
	jar, _ := cookiejar.New(nil) // never fails without options
	return &Browser{Base: c.Base, Client: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Page is an answer, read whole.
type Page struct {
	Status int
	Header http.Header
	Body   string
}

func (b *Browser) Do(t *testing.T, method, path string, form url.Values, origin string) Page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.Base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Page{Status: resp.StatusCode, Header: resp.Header, Body: string(data)}
}

func (b *Browser) Get(t *testing.T, path string) Page { return b.Do(t, http.MethodGet, path, nil, "") }

// Post sends a form as the console's own pages do: from its origin.
func (b *Browser) Post(t *testing.T, path string, form url.Values) Page {
	return b.Do(t, http.MethodPost, path, form, b.Base)
}

// FirstEvent reads a server-sent event stream until its first event
// other than the retry field, and closes it.
func (b *Browser) FirstEvent(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Client.Do(req)
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

var CsrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// Csrf is the CSRF token of a page's form.
func (p Page) Csrf(t *testing.T) string {
	t.Helper()
	m := CsrfField.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", p.Body)
	}
	return m[1]
}

// SignIn signs a person in through the form and returns the clusters page.
func (b *Browser) SignIn(t *testing.T, user, password string) Page {
	t.Helper()
	login := b.Get(t, "/login")
	p := b.Post(t, "/login", url.Values{"csrf": {login.Csrf(t)}, "username": {user}, "password": {password}})
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/clusters" {
		t.Fatalf("sign-in of %s: %d %s\n%s", user, p.Status, p.Header.Get("Location"), p.Body)
	}
	return b.Get(t, "/clusters")
}

// WaitIssuerTrusted waits until kube-apiserver accepts ichor-auth's
// tokens: its JWT authenticator looks for the issuer every few seconds
// until it first answers, which a freshly started ichor-auth may not have
// yet.
func WaitIssuerTrusted(t *testing.T, user, password string) {
	t.Helper()
	code, body := PasswordGrant(t.Context(), t, IssuerHTTPClient(t), user, password)
	var tok struct {
		IDToken string `json:"id_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); err != nil || code != http.StatusOK || tok.IDToken == "" {
		t.Fatalf("sign-in of %s at ichor-auth: %d %s", user, code, body)
	}
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = ReviewToken(ctx, tok.IDToken)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver does not accept ichor-auth's tokens: %v (last: %v)", err, last)
	}
}

// JWTLike is what a token (a JWT: base64url of a JSON header) looks like.
var JWTLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}`)

// SignInBurst is the console's own limit of sign-ins per browser.
const SignInBurst = 10
