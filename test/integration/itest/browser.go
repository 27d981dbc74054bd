package itest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ichor.dev/ichor/test/internal/proc"
)

// Chromium is a headless Debian Chromium (hack/install-chromium.sh) that
// trusts exactly the serving keys of the console and of the OpenID
// provider, in a profile of its own.
func Chromium(t *testing.T, c *Console) context.Context {
	t.Helper()
	path, err := proc.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	provider, err := tls.LoadX509KeyPair(CP.OIDC.CertFile, CP.OIDC.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	providerCert, err := x509.ParseCertificate(provider.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		// As root, Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		// This machine has no network beyond loopback: nothing to update or report.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// The console's and the provider's certificates come from CAs of
		// this test: the browser pins their public keys, which it honours
		// only with a profile directory of its own. No other certificate
		// error is let through.
		chromedp.Flag("ignore-certificate-errors-spki-list", c.SPKI+","+SPKIHash(providerCert)),
	)
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// Visitor is one person's tab, in a browser context of its own (cookies
// included), with what they see saved as screenshots.
type Visitor struct {
	T    *testing.T
	Ctx  context.Context
	Base string
	Name string
}

func NewVisitor(t *testing.T, browserCtx context.Context, c *Console, name string) *Visitor {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// The first run opens the tab, which lives as long as the context of
	// that run: this one, not a later run's with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab for %s: %v", name, err)
	}
	return &Visitor{T: t, Ctx: ctx, Base: c.Base, Name: name}
}

// Do runs browser actions, each run bounded by a minute, failing the test
// with where the browser is, what it shows, and a screenshot of it.
func (p *Visitor) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.Screenshot("failed-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, what))
		location := p.Run(chromedp.Location())
		p.T.Fatalf("%s, as %s: %v\nat %s, the page says:\n%s", what, p.Name, err, location, p.Text("body"))
	}
}

// Run is the value of a browser action that reads, or why there is none.
func (p *Visitor) Run(a chromedp.Action[string]) string {
	ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, a)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}

// Text is the visible text of the first element sel selects.
func (p *Visitor) Text(sel string) string { return p.Run(chromedp.Text(chromedp.CSS(sel))) }

// Open navigates to a console path and waits for its main content.
func (p *Visitor) Open(path string) {
	p.T.Helper()
	p.Do("open "+path, chromedp.Navigate(p.Base+path), chromedp.WaitReady(chromedp.CSS("main")))
}

// Screenshot saves the whole page under .local/screenshots/ for people to
// look at, and checks that the page carries no token and no key.
func (p *Visitor) Screenshot(name string) {
	if page := p.Run(chromedp.Evaluate[string](`document.documentElement.outerHTML`)); JWTLike.MatchString(page) || strings.Contains(page, "PRIVATE KEY") {
		p.T.Errorf("the page %s carries a token or a key:\n%s", name, page)
	}
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		p.T.Errorf("screenshot %s: %v", name, err)
		return
	}
	root, err := proc.RepoRoot()
	if err != nil {
		p.T.Fatal(err)
	}
	dir := filepath.Join(root, ".local", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), img, 0o644); err != nil {
		p.T.Fatal(err)
	}
}

// SignIn signs in through the form, as a person types it.
func (p *Visitor) SignIn(user, password string) {
	p.T.Helper()
	p.Open("/login")
	p.Do("sign in",
		chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), user),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
		chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("table.clusters")),
	)
	if who := p.Text(".who"); who != "ichor:"+user {
		p.T.Fatalf("signed in as %q, want ichor:%s", who, user)
	}
}
