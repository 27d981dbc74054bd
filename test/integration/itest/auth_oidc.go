package itest

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
	"strings"
	"testing"
	"time"

	"ichor.dev/ichor/test/oidcprovider"
)

// RunningIchor is an ichor command still running, whose stderr is read line
// by line.
type RunningIchor struct {
	Cmd    *exec.Cmd
	Lines  chan string
	Out    *bytes.Buffer
	ErrBuf *SyncBuffer
	Cancel context.CancelFunc
}

// StartIchor starts ichor args as the person.
func (p *Person) StartIchor(ctx context.Context, t *testing.T, args ...string) *RunningIchor {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cmd := exec.CommandContext(ctx, filepath.Join(IchorBin(t), "ichor"), args...)
	cmd.Env = p.Env()
	r := &RunningIchor{Cmd: cmd, Lines: make(chan string, 100), Out: &bytes.Buffer{}, ErrBuf: &SyncBuffer{}, Cancel: cancel}
	cmd.Stdout = r.Out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	go func() {
		defer close(r.Lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = r.ErrBuf.Write(append(sc.Bytes(), '\n'))
			r.Lines <- sc.Text()
		}
	}()
	return r
}

// Await returns the first match of re (its first group, if it has one) in
// what the command prints on stderr.
func (r *RunningIchor) Await(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-r.Lines:
			if !ok {
				t.Fatalf("ichor ended without printing %s:\n%s", re, r.ErrBuf.String())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m[len(m)-1]
			}
		case <-timeout:
			t.Fatalf("ichor printed no %s within a minute:\n%s", re, r.ErrBuf.String())
		}
	}
}

// Wait waits for the command to end.
func (r *RunningIchor) Wait(t *testing.T) CLIResult {
	t.Helper()
	for range r.Lines {
	}
	err := r.Cmd.Wait()
	res := CLIResult{Stdout: r.Out.String(), Stderr: r.ErrBuf.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return res
}

// ProviderClient is a browser of the provider: it keeps cookies and
// follows no redirect by itself.
func ProviderClient(t *testing.T) *http.Client {
	t.Helper()
	c := IssuerHTTPClient(t) // the same CA issued the provider's certificate
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// FollowTo follows redirects from start until one leads to path, and returns that URL.
func FollowTo(ctx context.Context, t *testing.T, c *http.Client, start, path string) *url.URL {
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

func PostProvider(ctx context.Context, t *testing.T, c *http.Client, to string, form url.Values) *http.Response {
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

// SignInAtProvider does in the provider's pages what a person does in a
// browser after opening authURL: signs in, and lets the browser go back to
// the ichor CLI's loopback listener with the code.
func SignInAtProvider(ctx context.Context, t *testing.T, authURL string, who oidcprovider.Person) {
	t.Helper()
	c := ProviderClient(t)
	loginURL := FollowTo(ctx, t, c, authURL, "/login/username")
	resp := PostProvider(ctx, t, c, CP.OIDC.URL+"/login/username", url.Values{"id": {loginURL.Query().Get("authRequestID")},
		"username": {who.Username}, "password": {who.Password}})
	loc := resp.Header.Get("Location")
	if loc == "" {
		t.Fatalf("signing in at the provider: %s, no redirect", resp.Status)
	}
	callback := FollowTo(ctx, t, c, loc, "/callback")
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

// ConfirmDevice does what a person does on the provider's device page.
func ConfirmDevice(ctx context.Context, t *testing.T, userCode string, who oidcprovider.Person) {
	t.Helper()
	c := ProviderClient(t)
	resp := PostProvider(ctx, t, c, CP.OIDC.URL+"/device/login", url.Values{"user_code": {userCode}, "username": {who.Username}, "password": {who.Password}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("device login: %s", resp.Status)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, CP.OIDC.URL+"/device/confirm?action=allowed", nil)
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

// SignInPathFor is the file ichor login keeps who's sign-in in (any issuer).
func (p *Person) SignInPathFor(t *testing.T, who string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(p.Home, ".ichor", "tokens", "*.json"))
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

func (p *Person) SignInAt(t *testing.T, path string) KeptSignIn {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s KeptSignIn
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Expire makes the kept sign-in at path look expired, so that the exec
// plugin renews it.
func Expire(t *testing.T, path string) {
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
