package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	authcmd "ichor.dev/ichor/pkg/cmd/auth"
	"ichor.dev/ichor/test/harness"
)

// tokenLifetime is ichor-auth's token lifetime in these tests: a disabled
// user is locked out within it.
const tokenLifetime = 15 * time.Second

// TestIchorUserSignIn: IchorUsers sign in with `ichor login` at Ichor's
// issuer and act through plain kubectl (the exec plugin) as ichor:<name>
// in the group of their role, within it and refused beyond it; every way
// in that should fail does, without telling whether a user exists.
func TestIchorUserSignIn(t *testing.T) {
	ctx := t.Context()
	ns := cp.Namespace(t)
	useUsersEnabled(ctx, t, true)
	users := apiClient(t).IchorV1alpha1().IchorUsers()
	name := func(n string) string { return n + "-" + ns }
	passwords := map[string]string{}
	for _, u := range []struct {
		name     string
		role     v1alpha1.UserRole
		password bool
		disabled bool
	}{
		{"dana", v1alpha1.UserRoleOperator, true, false},
		{"vic", v1alpha1.UserRoleViewer, true, false},
		{"nopw", v1alpha1.UserRoleViewer, false, false},
		{"off", v1alpha1.UserRoleOperator, true, true},
		{"eve", v1alpha1.UserRoleViewer, true, false},
		{"rita", v1alpha1.UserRoleViewer, true, false},
	} {
		if u.password {
			passwords[u.name] = "correct horse battery " + u.name
		}
		createUser(ctx, t, name(u.name), v1alpha1.IchorUserSpec{Role: u.role, Disabled: u.disabled}, passwords[u.name])
	}
	stopAuth := runAuth(t, func(o *authcmd.Options) { o.TokenLifetime = tokenLifetime })
	p := newPerson(t, ns)
	dana := name("dana")

	t.Run("an operator signs in and kubectl acts as her", func(t *testing.T) {
		p.login(ctx, t, dana, passwords["dana"]).ok(t, "ichor login", "Signed in", `Context "ichor:`+dana+`"`)
		who := p.whoami(ctx, t)
		if who.Username != "ichor:"+dana || !slices.Contains(who.Groups, "ichor:operator") || !slices.Contains(who.Groups, "system:authenticated") {
			t.Fatalf("kubectl auth whoami: %+v", who)
		}
		u, err := users.Get(ctx, dana, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if who.UID != string(u.UID) {
			t.Errorf("uid %q, want the IchorUser's %q", who.UID, u.UID)
		}
		if u.Status.LastLoginAt == nil || time.Since(u.Status.LastLoginAt.Time) > time.Minute {
			t.Errorf("lastLoginAt not recorded: %v", u.Status.LastLoginAt)
		}
		// Within the role, and refused beyond it.
		if out, err := p.kubectl(ctx, "get", "talosmachines"); err != nil {
			t.Errorf("an operator lists machines: %v\n%s", err, out)
		}
		if out, err := p.kubectl(ctx, "create", "namespace", "by-"+dana); err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, `"ichor:`+dana+`"`) {
			t.Errorf("an operator creates a namespace: %v\n%s", err, out)
		}
		if out, _ := p.kubectl(ctx, "auth", "can-i", "start", "talosoperations", "--subresource=ca-rotation"); lastLine(out) != "no" {
			t.Errorf("an operator may start a CA rotation: %s", out)
		}
		if out, _ := p.kubectl(ctx, "auth", "can-i", "approve", "talosmachines", "--subresource=approval"); lastLine(out) != "yes" {
			t.Errorf("an operator may not approve: %s", out)
		}
		// What is kept: the kubeconfig holds no secret; the session is the user's alone.
		s := p.signIn(t, dana)
		kubeconfig, err := os.ReadFile(p.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for what, secret := range map[string]string{"token": s.IDToken, "refresh token": s.RefreshToken, "password": passwords["dana"]} {
			if bytes.Contains(kubeconfig, []byte(secret)) {
				t.Errorf("the kubeconfig holds the %s", what)
			}
		}
		for path, want := range map[string]os.FileMode{p.signInPath(t, dana): 0o600, filepath.Dir(p.signInPath(t, dana)): 0o700} {
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), want, err)
			}
		}
	})

	t.Run("the audit log names the sign-in and holds no password", func(t *testing.T) {
		found := false
		for _, e := range auditEvents(t) {
			for who, password := range passwords {
				if bytes.Contains(e.raw, []byte(password)) {
					t.Errorf("the audit log holds %s's password, in a %s event of %s %s", who, e.Level, e.Verb, e.RequestURI)
				}
			}
			if e.ObjectRef.Subresource == "login" && e.ObjectRef.Name == dana && e.User.Username == authUser {
				found = true
				if e.Level != "Metadata" {
					t.Errorf("a sign-in is audited at level %s", e.Level)
				}
			}
		}
		if !found {
			t.Error("no audit event of ichor-auth checking dana's password")
		}
	})

	t.Run("wrong passwords, unknown users and users without one get one answer", func(t *testing.T) {
		const answer = "sign-in refused: the username or password is wrong"
		p.login(ctx, t, name("vic"), "not the password at all").fails(t, "a wrong password", answer)
		p.login(ctx, t, name("nobody"), "not the password at all").fails(t, "an unknown user", answer)
		p.login(ctx, t, name("nopw"), "not the password at all").fails(t, "a user without a password", answer)
		// Knowing the password, a disabled user learns it is disabled.
		p.login(ctx, t, name("off"), passwords["off"]).fails(t, "a disabled user", "the user is disabled")
		u, err := users.Get(ctx, name("vic"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.Status.LastLoginAt != nil {
			t.Errorf("a refused sign-in was recorded: %v", u.Status.LastLoginAt)
		}
		// Only a sign-in records one: not a write of /status.
		forged := metav1.Unix(1767225600, 0)
		u.Status.LastLoginAt = &forged
		if u, err = users.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil || u.Status.LastLoginAt != nil {
			t.Errorf("lastLoginAt written through /status: %v %v", u.Status.LastLoginAt, err)
		}
	})

	t.Run("brute force is slowed down, per user and observably", func(t *testing.T) {
		from := sourceClient(t, "127.0.0.2")
		for i := range 5 {
			if code, body := passwordGrant(ctx, t, from, name("rita"), "guess number "+string(rune('a'+i))); code != http.StatusBadRequest {
				t.Fatalf("guess %d: %d %s", i+1, code, body)
			}
		}
		// The right password, now, is not even checked.
		code, body := passwordGrant(ctx, t, from, name("rita"), passwords["rita"])
		if code != http.StatusTooManyRequests || !strings.Contains(body, "too many sign-in attempts") {
			t.Fatalf("the sixth attempt: %d %s", code, body)
		}
		// The same from another address: the user's bucket is empty too.
		if code, body := passwordGrant(ctx, t, sourceClient(t, "127.0.0.3"), name("rita"), passwords["rita"]); code != http.StatusTooManyRequests {
			t.Fatalf("from another address: %d %s", code, body)
		}
	})

	t.Run("tokens the issuer did not sign for kube-apiserver are refused", func(t *testing.T) {
		u, err := users.Get(ctx, dana, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key, kid := issuerSigningKey(ctx, t)
		now := time.Now()
		good := map[string]any{"iss": cp.Auth.URL, "sub": dana, "aud": "ichor", "exp": now.Add(time.Minute).Unix(),
			"iat": now.Unix(), "nbf": now.Unix(), "uid": string(u.UID), "role": "operator"}
		with := func(change map[string]any) map[string]any {
			c := map[string]any{}
			for k, v := range good {
				c[k] = v
			}
			for k, v := range change {
				if v == nil {
					delete(c, k)
				} else {
					c[k] = v
				}
			}
			return c
		}
		// The control: the issuer's key and claims are accepted.
		if who, err := reviewToken(ctx, signToken(t, key, kid, good)); err != nil || who.Username != "ichor:"+dana {
			t.Fatalf("a token like the issuer's: %+v %v", who, err)
		}
		forged, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for what, token := range map[string]string{
			"a forged signature":            signToken(t, forged, kid, good),
			"another audience":              signToken(t, key, kid, with(map[string]any{"aud": "kubernetes"})),
			"an expired token":              signToken(t, key, kid, with(map[string]any{"exp": now.Add(-2 * time.Minute).Unix(), "iat": now.Add(-3 * time.Minute).Unix(), "nbf": now.Add(-3 * time.Minute).Unix()})),
			"another issuer":                signToken(t, key, kid, with(map[string]any{"iss": cp.OIDC.URL})),
			"a role system:masters":         signToken(t, key, kid, with(map[string]any{"role": "masters", "groups": []string{"system:masters"}})),
			"a subject system:admin":        signToken(t, key, kid, with(map[string]any{"sub": "system:admin"})),
			"groups system:masters claimed": signToken(t, key, kid, with(map[string]any{"groups": []string{"system:masters"}, "role": nil})),
		} {
			who, err := reviewToken(ctx, token)
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: %+v, %v; want Unauthorized", what, who, err)
			}
		}
		// And a token whose groups claim names system:masters beside a
		// real role gets the role's group only.
		who, err := reviewToken(ctx, signToken(t, key, kid, with(map[string]any{"groups": []string{"system:masters"}})))
		if err != nil || slices.Contains(who.Groups, "system:masters") {
			t.Errorf("a groups claim beside the role: %+v %v", who, err)
		}
	})

	t.Run("a refresh token renews once; replayed or after logout it renews nothing", func(t *testing.T) {
		s := p.signIn(t, dana)
		code, body := refreshGrant(ctx, t, s.RefreshToken)
		if code != http.StatusOK {
			t.Fatalf("renew: %d %s", code, body)
		}
		var renewed struct {
			Refresh string `json:"refresh_token"`
		}
		if err := json.Unmarshal([]byte(body), &renewed); err != nil || renewed.Refresh == "" || renewed.Refresh == s.RefreshToken {
			t.Fatalf("renewed: %s %v", body, err)
		}
		if code, body := refreshGrant(ctx, t, s.RefreshToken); code != http.StatusBadRequest || !strings.Contains(body, "already used") {
			t.Fatalf("a replayed refresh token: %d %s", code, body)
		}
		// The replay ended the session: the new token renews nothing either.
		if code, body := refreshGrant(ctx, t, renewed.Refresh); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
			t.Fatalf("the token after a replay: %d %s", code, body)
		}
		r := p.ichor(ctx, t, nil, "auth", "token", "--issuer", cp.Auth.URL, "--username", dana)
		r.fails(t, "auth token after the session ended", "your Ichor session has ended", "ichor login --issuer "+cp.Auth.URL)

		// Sign in again, then out.
		p.login(ctx, t, dana, passwords["dana"]).ok(t, "ichor login again")
		s = p.signIn(t, dana)
		p.ichor(ctx, t, nil, "logout", "--issuer", cp.Auth.URL, "--username", dana).ok(t, "ichor logout", "Signed out")
		if code, body := refreshGrant(ctx, t, s.RefreshToken); code != http.StatusBadRequest {
			t.Fatalf("a refresh token after logout: %d %s", code, body)
		}
		if _, err := os.Stat(p.signInPath(t, dana)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the session is still kept after logout: %v", err)
		}
		if out, err := p.kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "not signed in") {
			t.Errorf("kubectl after logout: %v\n%s", err, out)
		}
	})

	t.Run("a disabled user is locked out within the token lifetime", func(t *testing.T) {
		p.login(ctx, t, dana, passwords["dana"]).ok(t, "ichor login")
		token := p.signIn(t, dana).IDToken
		if _, err := reviewToken(ctx, token); err != nil {
			t.Fatalf("the fresh token: %v", err)
		}
		u, err := users.Get(ctx, dana, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Spec.Disabled = true
		if _, err := users.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		disabledAt := time.Now()
		// No renewal: the exec plugin says why.
		r := p.ichor(ctx, t, nil, "auth", "token", "--issuer", cp.Auth.URL, "--username", dana)
		r.fails(t, "auth token of a disabled user", "the user is disabled")
		// The last token works until it expires, and not after.
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, tokenLifetime+time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := reviewToken(ctx, token)
			return apierrors.IsUnauthorized(err), nil
		}); err != nil {
			t.Fatalf("the disabled user's token still works %s later", time.Since(disabledAt))
		}
		if after := time.Since(disabledAt); after > tokenLifetime+15*time.Second {
			t.Errorf("locked out %s after being disabled; the token lifetime is %s", after, tokenLifetime)
		}
	})

	t.Run("a password change ends the sessions begun before it", func(t *testing.T) {
		vic := name("vic")
		p.login(ctx, t, vic, passwords["vic"]).ok(t, "ichor login")
		passwords["vic"] = "a new password for vic"
		if _, err := users.UpdatePassword(ctx, vic, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: vic}, Password: passwords["vic"]}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := p.ichor(ctx, t, nil, "auth", "token", "--issuer", cp.Auth.URL, "--username", vic)
		r.fails(t, "auth token after the password changed", "the user's password changed")
		p.login(ctx, t, vic, passwords["vic"]).ok(t, "ichor login with the new password")
	})

	t.Run("with the issuer down, issued tokens keep working and sign-in fails clearly", func(t *testing.T) {
		eve := name("eve")
		p.login(ctx, t, eve, passwords["eve"]).ok(t, "ichor login")
		token := p.signIn(t, eve).IDToken
		stopAuth()
		// kube-apiserver verifies with the keys it has.
		if who, err := reviewToken(ctx, token); err != nil || who.Username != "ichor:"+eve {
			t.Errorf("an issued token with the issuer down: %+v %v", who, err)
		}
		// The exec plugin cannot renew it, says so, and hands out the token while it lasts.
		r := p.ichor(ctx, t, nil, "auth", "token", "--issuer", cp.Auth.URL, "--username", eve)
		r.ok(t, "auth token with the issuer down", `"token":"`+token+`"`)
		if !strings.Contains(r.stderr, "cannot reach the issuer at "+cp.Auth.URL) {
			t.Errorf("auth token does not say the issuer is down: %s", r.stderr)
		}
		p.login(ctx, t, eve, passwords["eve"]).fails(t, "ichor login with the issuer down", "cannot reach the issuer at "+cp.Auth.URL)
	})
}

// lastLine is the last line of out, trimmed: kubectl's answer after its warnings.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// person is someone at their own shell: a home directory, and a kubeconfig
// that knows the management cluster but holds no credential.
type person struct {
	home, kubeconfig string
}

func newPerson(t *testing.T, ns string) *person {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["management"] = cluster
	cfg.Contexts["management"] = &clientcmdapi.Context{Cluster: "management", Namespace: ns}
	cfg.CurrentContext = "management"
	p := &person{home: t.TempDir()}
	p.kubeconfig = filepath.Join(p.home, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *person) env() []string {
	return append(os.Environ(), "HOME="+p.home, "KUBECONFIG="+p.kubeconfig, "KUBECACHEDIR="+filepath.Join(p.home, "cache"),
		"PATH="+ichorBinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// ichor runs the ichor CLI as the person, with env added.
func (p *person) ichor(ctx context.Context, t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(ichorBin(t), "ichor"), args...)
	cmd.Env = append(p.env(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ichor %v: %v", args, err)
	}
	return r
}

// login runs ichor login for user with password.
func (p *person) login(ctx context.Context, t *testing.T, user, password string) cliResult {
	t.Helper()
	return p.ichor(ctx, t, []string{"ICHOR_PASSWORD=" + password}, "login", "--issuer", cp.Auth.URL, "--username", user,
		"--issuer-certificate-authority", cp.Auth.CAFile)
}

// kubectl runs kubectl as the person; it returns stdout and stderr together.
func (p *person) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...)
	cmd.Env = p.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// whoami is kubectl auth whoami, polled until kube-apiserver has read the
// issuer's discovery document (it retries every 10 seconds).
func (p *person) whoami(ctx context.Context, t *testing.T) authenticationv1.UserInfo {
	t.Helper()
	return p.whoamiIn(ctx, t)
}

// whoamiIn is whoami with kubectl flags (--context).
func (p *person) whoamiIn(ctx context.Context, t *testing.T, flags ...string) authenticationv1.UserInfo {
	t.Helper()
	var review authenticationv1.SelfSubjectReview
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := p.kubectl(ctx, append(flags, "auth", "whoami", "-o", "json")...)
		last = out
		return err == nil && json.Unmarshal([]byte(out), &review) == nil, nil
	}); err != nil {
		t.Fatalf("kubectl auth whoami: %v\n%s", err, last)
	}
	return review.Status.UserInfo
}

// signInPath and signIn are what ichor login kept for user.
func (p *person) signInPath(t *testing.T, user string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(p.home, ".ichor", "tokens", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"username":"`+user+`"`) {
			return m
		}
	}
	return filepath.Join(p.home, ".ichor", "tokens", "none-for-"+user)
}

type keptSignIn struct {
	IDToken      string `json:"idToken"`
	RefreshToken string `json:"refreshToken"`
}

func (p *person) signIn(t *testing.T, user string) keptSignIn {
	t.Helper()
	data, err := os.ReadFile(p.signInPath(t, user))
	if err != nil {
		t.Fatal(err)
	}
	var s keptSignIn
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sourceClient is an HTTP client to the issuer from the loopback address ip.
func sourceClient(t *testing.T, ip string) *http.Client {
	t.Helper()
	c := issuerHTTPClient(t)
	tr := c.Transport.(*http.Transport)
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext
	return c
}

// passwordGrant and refreshGrant call the issuer's token endpoint directly.
func passwordGrant(ctx context.Context, t *testing.T, c *http.Client, user, password string) (int, string) {
	t.Helper()
	return postForm(ctx, t, c, cp.Auth.URL+"/token", url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}})
}

func refreshGrant(ctx context.Context, t *testing.T, token string) (int, string) {
	t.Helper()
	return postForm(ctx, t, issuerHTTPClient(t), cp.Auth.URL+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}})
}

func postForm(ctx context.Context, t *testing.T, c *http.Client, to string, form url.Values) (int, string) {
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
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// reviewToken asks kube-apiserver who token is (a SelfSubjectReview).
func reviewToken(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	cfg := &rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.AdminConfig.CAFile}}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return r.Status.UserInfo, nil
}

// issuerSigningKey reads the key ichor-auth signs with now from its Secret,
// as only someone who can read that Secret (the management cluster's admin)
// could: to show what kube-apiserver does with claims the issuer never signs.
func issuerSigningKey(ctx context.Context, t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	s, err := kubernetes.NewForConfigOrDie(cp.AdminConfig).CoreV1().Secrets(harness.IchorNamespace).Get(ctx, "ichor-auth-keys", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct {
			ID       string    `json:"kid"`
			SignFrom time.Time `json:"signFrom"`
			PKCS8    []byte    `json:"pkcs8"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(s.Data["keys.json"], &set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("ichor-auth's keys: %v", err)
	}
	k := set.Keys[len(set.Keys)-1]
	key, err := x509.ParsePKCS8PrivateKey(k.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return key.(*ecdsa.PrivateKey), k.ID
}

// signToken signs claims with key as kid.
func signToken(t *testing.T, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestIssuerKeyRotation: ichor-auth rotates its signing key; every token it
// signs names a key it published before, and kube-apiserver accepts tokens
// of the old key and of the new one.
func TestIssuerKeyRotation(t *testing.T) {
	ctx := t.Context()
	ns := cp.Namespace(t)
	useUsersEnabled(ctx, t, true)
	name := "kim-" + ns
	const password = "kim's long password"
	createUser(ctx, t, name, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, password)
	runAuth(t, func(o *authcmd.Options) {
		o.TokenLifetime, o.KeyRotation, o.KeyLead = 30*time.Second, 15*time.Second, 3*time.Second
	})
	c := issuerHTTPClient(t)
	code, body := passwordGrant(ctx, t, c, name, password)
	if code != http.StatusOK {
		t.Fatalf("sign in: %d %s", code, body)
	}
	var resp struct {
		IDToken string `json:"id_token"`
		Refresh string `json:"refresh_token"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	first := resp.IDToken
	firstKid := tokenKeyID(t, first)
	// Renew until a token is signed by another key, checking each against
	// the keys published before it was asked for.
	var second string
	last := first
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		published := publishedKeyIDs(ctx, t, c)
		code, body := refreshGrant(ctx, t, resp.Refresh)
		if code != http.StatusOK {
			return false, fmt.Errorf("renew: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			return false, err
		}
		kid := tokenKeyID(t, resp.IDToken)
		if !slices.Contains(published, kid) {
			return false, fmt.Errorf("a token is signed with key %s, which was not published before (%v)", kid, published)
		}
		if kid != firstKid {
			second = resp.IDToken
			return true, nil
		}
		last = resp.IDToken // the old key's latest token, still valid after the switch
		return false, nil
	}); err != nil {
		t.Fatalf("no token signed by a new key: %v", err)
	}
	// kube-apiserver fetches the issuer's keys when it meets an unknown key
	// ID, and a verification that meets one while a fetch begun earlier is
	// in flight takes that fetch's answer; so the new key's token may be
	// refused once before the next fetch has the key. Each must be accepted
	// within its lifetime; both are tried at once, so that neither's time
	// runs out waiting for the other's.
	var wg sync.WaitGroup
	for what, token := range map[string]string{"the new key's token": second, "the old key's last token": last} {
		expiry := tokenExpiry(t, token)
		wg.Go(func() {
			var who authenticationv1.UserInfo
			var err error
			if pollErr := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Until(expiry), true, func(ctx context.Context) (bool, error) {
				who, err = reviewToken(ctx, token)
				return err == nil && who.Username == "ichor:"+name, nil
			}); pollErr != nil {
				t.Errorf("%s: not accepted within its lifetime: %+v %v", what, who, err)
			}
		})
	}
	wg.Wait()
}

// tokenExpiry is when a JWT says it expires (its signature unchecked).
func tokenExpiry(t *testing.T, token string) time.Time {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatalf("parse a token: %v", err)
	}
	var claims jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil || claims.Expiry == nil {
		t.Fatalf("a token's expiry: %v", err)
	}
	return claims.Expiry.Time()
}

// tokenKeyID is the kid of a JWT's header.
func tokenKeyID(t *testing.T, token string) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil || len(parsed.Headers) != 1 {
		t.Fatalf("parse a token: %v", err)
	}
	return parsed.Headers[0].KeyID
}

// publishedKeyIDs are the key IDs of the issuer's JWKS now.
func publishedKeyIDs(ctx context.Context, t *testing.T, c *http.Client) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.Auth.URL+"/keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range set.Keys {
		if k.Algorithm != string(jose.ES256) || !k.IsPublic() {
			t.Errorf("published key %s: algorithm %s, public %v", k.KeyID, k.Algorithm, k.IsPublic())
		}
		ids = append(ids, k.KeyID)
	}
	return ids
}
