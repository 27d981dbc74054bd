package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"ichor.dev/ichor/test/oidcprovider"
)

// TestOIDCSignIn: people of the company's OpenID provider sign in with
// `ichor login --oidc`, in a browser (authorization code with PKCE) or with
// the device flow, and kubectl acts as oidc:<email> in the ichor: groups
// their provider groups give, and no other.
func TestOIDCSignIn(t *testing.T) {
	ctx := t.Context()
	ns := cp.Namespace(t)
	person := func(name string) oidcprovider.Person { return oidcPerson(t, name) }

	t.Run("in a browser: an operator", func(t *testing.T) {
		p := newPerson(t, ns)
		olga := person("olga")
		login := p.startIchor(ctx, t, "login", "--oidc", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile, "--no-browser")
		authURL := login.await(t, regexp.MustCompile(`https://\S+/auth\?\S+`))
		signInAtProvider(ctx, t, authURL, olga)
		login.wait(t).ok(t, "ichor login --oidc", "Signed in", `Context "oidc:`+olga.Email+`"`)
		who := p.whoami(ctx, t)
		if who.Username != "oidc:"+olga.Email || !slices.Contains(who.Groups, "ichor:operator") {
			t.Fatalf("kubectl auth whoami: %+v", who)
		}
		for _, g := range who.Groups {
			if g != "ichor:operator" && g != "system:authenticated" {
				t.Errorf("group %q beyond the mapped ones", g)
			}
		}
		if out, err := p.kubectl(ctx, "get", "talosmachines"); err != nil {
			t.Errorf("an operator lists machines: %v\n%s", err, out)
		}
		if out, _ := p.kubectl(ctx, "auth", "can-i", "create", "ichorusers.ichor.dev"); lastLine(out) != "no" {
			t.Errorf("an operator may create IchorUsers: %s", out)
		}

		// The exec plugin renews the token with the provider's refresh token.
		path := p.signInPathFor(t, "client:"+oidcprovider.ClientID)
		before := p.signInAt(t, path)
		expire(t, path)
		r := p.ichor(ctx, t, nil, "auth", "token", "--oidc", "--issuer", cp.OIDC.URL, "--username", olga.Email)
		r.ok(t, "auth token, renewed")
		after := p.signInAt(t, path)
		if after.IDToken == before.IDToken || !strings.Contains(r.stdout, after.IDToken) {
			t.Error("the token was not renewed")
		}
		if who := p.whoami(ctx, t); who.Username != "oidc:"+olga.Email {
			t.Errorf("after renewal: %+v", who)
		}
		p.ichor(ctx, t, nil, "logout", "--oidc", "--issuer", cp.OIDC.URL, "--username", olga.Email).ok(t, "ichor logout --oidc", "Signed out")
		if out, err := p.kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "not signed in") {
			t.Errorf("kubectl after logout: %v\n%s", err, out)
		}
	})

	t.Run("with the device flow: groups that name nothing of Ichor's give nothing", func(t *testing.T) {
		p := newPerson(t, ns)
		pat := person("pat")
		login := p.startIchor(ctx, t, "login", "--oidc", "--device", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile)
		code := login.await(t, regexp.MustCompile(`(?m)^\s+([A-Z0-9]{4}-[A-Z0-9]{4})\s*$`))
		confirmDevice(ctx, t, strings.TrimSpace(code), pat)
		login.wait(t).ok(t, "ichor login --oidc --device", "Signed in", "oidc:"+pat.Email)
		who := p.whoami(ctx, t)
		if who.Username != "oidc:"+pat.Email {
			t.Fatalf("kubectl auth whoami: %+v", who)
		}
		// pat's provider claims system:masters and developers: neither maps.
		if !slices.Equal(who.Groups, []string{"system:authenticated"}) {
			t.Errorf("groups %v, want system:authenticated alone", who.Groups)
		}
		if out, err := p.kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("someone without an Ichor group lists machines: %v\n%s", err, out)
		}
	})

	t.Run("an unverified email is refused by kube-apiserver", func(t *testing.T) {
		p := newPerson(t, ns)
		una := person("una")
		login := p.startIchor(ctx, t, "login", "--oidc", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile, "--no-browser")
		signInAtProvider(ctx, t, login.await(t, regexp.MustCompile(`https://\S+/auth\?\S+`)), una)
		r := login.wait(t)
		r.ok(t, "ichor login --oidc as una")
		if !strings.Contains(r.stderr, "has not verified una@example.com") {
			t.Errorf("no warning about the unverified email: %s", r.stderr)
		}
		token := p.signInAt(t, p.signInPathFor(t, "client:"+oidcprovider.ClientID)).IDToken
		if who, err := reviewToken(ctx, token); !apierrors.IsUnauthorized(err) {
			t.Errorf("una's token with an unverified email: %+v %v", who, err)
		}
	})

	t.Run("a wrong password at the provider signs no one in", func(t *testing.T) {
		p := newPerson(t, ns)
		olga := person("olga")
		olga.Password = "not olga's password"
		login := p.startIchor(ctx, t, "login", "--oidc", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile, "--no-browser")
		authURL := login.await(t, regexp.MustCompile(`https://\S+/auth\?\S+`))
		c := providerClient(t)
		loginURL := followTo(ctx, t, c, authURL, "/login/username")
		resp := postProvider(ctx, t, c, cp.OIDC.URL+"/login/username", url.Values{"id": {loginURL.Query().Get("authRequestID")},
			"username": {olga.Username}, "password": {olga.Password}})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" {
			t.Errorf("a wrong password: %s to %q", resp.Status, resp.Header.Get("Location"))
		}
		login.cancel()
		if _, err := os.Stat(filepath.Join(p.home, ".ichor", "tokens")); err == nil {
			if matches, _ := filepath.Glob(filepath.Join(p.home, ".ichor", "tokens", "*.json")); len(matches) > 0 {
				t.Errorf("a sign-in was kept: %v", matches)
			}
		}
	})
}

// runningIchor is an ichor command still running, whose stderr is read line
// by line.
type runningIchor struct {
	cmd    *exec.Cmd
	lines  chan string
	out    *bytes.Buffer
	errBuf *syncBuffer
	cancel context.CancelFunc
}

// startIchor starts ichor args as the person.
func (p *person) startIchor(ctx context.Context, t *testing.T, args ...string) *runningIchor {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cmd := exec.CommandContext(ctx, filepath.Join(ichorBin(t), "ichor"), args...)
	cmd.Env = p.env()
	r := &runningIchor{cmd: cmd, lines: make(chan string, 100), out: &bytes.Buffer{}, errBuf: &syncBuffer{}, cancel: cancel}
	cmd.Stdout = r.out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = r.errBuf.Write(append(sc.Bytes(), '\n'))
			r.lines <- sc.Text()
		}
	}()
	return r
}

// await returns the first match of re (its first group, if it has one) in
// what the command prints on stderr.
func (r *runningIchor) await(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-r.lines:
			if !ok {
				t.Fatalf("ichor ended without printing %s:\n%s", re, r.errBuf.String())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m[len(m)-1]
			}
		case <-timeout:
			t.Fatalf("ichor printed no %s within a minute:\n%s", re, r.errBuf.String())
		}
	}
}

// wait waits for the command to end.
func (r *runningIchor) wait(t *testing.T) cliResult {
	t.Helper()
	for range r.lines {
	}
	err := r.cmd.Wait()
	res := cliResult{stdout: r.out.String(), stderr: r.errBuf.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return res
}

// providerClient is a browser of the provider: it keeps cookies and
// follows no redirect by itself.
func providerClient(t *testing.T) *http.Client {
	t.Helper()
	c := issuerHTTPClient(t) // the same CA issued the provider's certificate
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// followTo follows redirects from start until one leads to path, and returns that URL.
func followTo(ctx context.Context, t *testing.T, c *http.Client, start, path string) *url.URL {
	t.Helper()
	next, err := url.Parse(start)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if next.Path == path {
			return next
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, next.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if loc == "" {
			t.Fatalf("%s answered %s, no redirect to %s", next, resp.Status, path)
		}
		if next, err = next.Parse(loc); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("no redirect to %s", path)
	return nil
}

func postProvider(ctx context.Context, t *testing.T, c *http.Client, to string, form url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// signInAtProvider does in the provider's pages what a person does in a
// browser after opening authURL: signs in, and lets the browser go back to
// the ichor CLI's loopback listener with the code.
func signInAtProvider(ctx context.Context, t *testing.T, authURL string, who oidcprovider.Person) {
	t.Helper()
	c := providerClient(t)
	loginURL := followTo(ctx, t, c, authURL, "/login/username")
	resp := postProvider(ctx, t, c, cp.OIDC.URL+"/login/username", url.Values{"id": {loginURL.Query().Get("authRequestID")},
		"username": {who.Username}, "password": {who.Password}})
	loc := resp.Header.Get("Location")
	if loc == "" {
		t.Fatalf("signing in at the provider: %s, no redirect", resp.Status)
	}
	callback := followTo(ctx, t, c, loc, "/callback")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, callback.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(back.Body)
	back.Body.Close()
	if back.StatusCode != http.StatusOK || !strings.Contains(string(body), "Authorization received") {
		t.Fatalf("the CLI's callback: %s %s", back.Status, body)
	}
}

// confirmDevice does what a person does on the provider's device page.
func confirmDevice(ctx context.Context, t *testing.T, userCode string, who oidcprovider.Person) {
	t.Helper()
	c := providerClient(t)
	resp := postProvider(ctx, t, c, cp.OIDC.URL+"/device/login", url.Values{"user_code": {userCode}, "username": {who.Username}, "password": {who.Password}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("device login: %s", resp.Status)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.OIDC.URL+"/device/confirm?action=allowed", nil)
	if err != nil {
		t.Fatal(err)
	}
	confirm, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	confirm.Body.Close()
	if confirm.StatusCode != http.StatusOK {
		t.Fatalf("device confirm: %s", confirm.Status)
	}
}

// signInPathFor is the file ichor login keeps who's sign-in in (any issuer).
func (p *person) signInPathFor(t *testing.T, who string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(p.home, ".ichor", "tokens", "*.json"))
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Username, ClientID string
		}
		if json.Unmarshal(data, &s) == nil && ("client:"+s.ClientID == who || s.Username == who) {
			return m
		}
	}
	t.Fatalf("no sign-in kept for %s", who)
	return ""
}

func (p *person) signInAt(t *testing.T, path string) keptSignIn {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s keptSignIn
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// expire makes the kept sign-in at path look expired, so that the exec
// plugin renews it.
func expire(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	s["expiry"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	data, err = json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
