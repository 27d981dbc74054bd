package itest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/test/harness"
)

// TokenLifetime is ichor-auth's token lifetime in these tests: a disabled
// user is locked out within it.
const TokenLifetime = 15 * time.Second

// LastLine is the last line of out, trimmed: kubectl's answer after its warnings.
func LastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Person is someone at their own shell: a home directory, and a kubeconfig
// that knows the management cluster but holds no credential.
type Person struct {
	Home, Kubeconfig string
}

func NewPerson(t *testing.T, ns string) *Person {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(CP.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["management"] = cluster
	cfg.Contexts["management"] = &clientcmdapi.Context{Cluster: "management", Namespace: ns}
	cfg.CurrentContext = "management"
	p := &Person{Home: t.TempDir()}
	p.Kubeconfig = filepath.Join(p.Home, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *Person) Env() []string {
	return append(os.Environ(), "HOME="+p.Home, "KUBECONFIG="+p.Kubeconfig, "KUBECACHEDIR="+filepath.Join(p.Home, "cache"),
		"PATH="+IchorBinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Ichor runs the ichor CLI as the person, with env added.
func (p *Person) Ichor(ctx context.Context, t *testing.T, env []string, args ...string) CLIResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(IchorBin(t), "ichor"), args...)
	cmd.Env = append(p.Env(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := CLIResult{Stdout: out.String(), Stderr: errOut.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ichor %v: %v", args, err)
	}
	return r
}

// Login runs ichor login for user with password.
func (p *Person) Login(ctx context.Context, t *testing.T, user, password string) CLIResult {
	t.Helper()
	return p.Ichor(ctx, t, []string{"ICHOR_PASSWORD=" + password}, "login", "--issuer", CP.Auth.URL, "--username", user,
		"--issuer-certificate-authority", CP.Auth.CAFile)
}

// Kubectl runs kubectl as the person; it returns stdout and stderr together.
func (p *Person) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(CP.BinDir, "kubectl"), args...)
	cmd.Env = p.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Whoami is kubectl auth whoami, polled until kube-apiserver has read the
// issuer's discovery document (it retries every 10 seconds).
func (p *Person) Whoami(ctx context.Context, t *testing.T) authenticationv1.UserInfo {
	t.Helper()
	return p.WhoamiIn(ctx, t)
}

// WhoamiIn is whoami with kubectl flags (--context).
func (p *Person) WhoamiIn(ctx context.Context, t *testing.T, flags ...string) authenticationv1.UserInfo {
	t.Helper()
	var review authenticationv1.SelfSubjectReview
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := p.Kubectl(ctx, append(flags, "auth", "whoami", "-o", "json")...)
		last = out
		return err == nil && json.Unmarshal([]byte(out), &review) == nil, nil
	}); err != nil {
		t.Fatalf("kubectl auth whoami: %v\n%s", err, last)
	}
	return review.Status.UserInfo
}

// SignInPath and signIn are what ichor login kept for user.
func (p *Person) SignInPath(t *testing.T, user string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(p.Home, ".ichor", "tokens", "*.json"))
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
	return filepath.Join(p.Home, ".ichor", "tokens", "none-for-"+user)
}

type KeptSignIn struct {
	IDToken      string `json:"idToken"`
	RefreshToken string `json:"refreshToken"`
}

func (p *Person) SignIn(t *testing.T, user string) KeptSignIn {
	t.Helper()
	data, err := os.ReadFile(p.SignInPath(t, user))
	if err != nil {
		t.Fatal(err)
	}
	var s KeptSignIn
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// SourceClient is an HTTP client to the issuer from the loopback address ip.
func SourceClient(t *testing.T, ip string) *http.Client {
	t.Helper()
	c := IssuerHTTPClient(t)
	tr := c.Transport.(*http.Transport)
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext
	return c
}

// PasswordGrant and refreshGrant call the issuer's token endpoint directly.
func PasswordGrant(ctx context.Context, t *testing.T, c *http.Client, user, password string) (int, string) {
	t.Helper()
	return PostForm(ctx, t, c, CP.Auth.URL+"/token", url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}})
}

func RefreshGrant(ctx context.Context, t *testing.T, token string) (int, string) {
	t.Helper()
	return PostForm(ctx, t, IssuerHTTPClient(t), CP.Auth.URL+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}})
}

func PostForm(ctx context.Context, t *testing.T, c *http.Client, to string, form url.Values) (int, string) {
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

// ReviewToken asks kube-apiserver who token is (a SelfSubjectReview).
func ReviewToken(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	cfg := &rest.Config{Host: CP.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: CP.AdminConfig.CAFile}}
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

// IssuerSigningKey reads the key ichor-auth signs with now from its Secret,
// as only someone who can read that Secret (the management cluster's admin)
// could: to show what kube-apiserver does with claims the issuer never signs.
func IssuerSigningKey(ctx context.Context, t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	s, err := kubernetes.NewForConfigOrDie(CP.AdminConfig).CoreV1().Secrets(harness.IchorNamespace).Get(ctx, "ichor-auth-keys", metav1.GetOptions{})
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

// SignToken signs claims with key as kid.
func SignToken(t *testing.T, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
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

// TokenExpiry is when a JWT says it expires (its signature unchecked).
func TokenExpiry(t *testing.T, token string) time.Time {
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

// TokenKeyID is the kid of a JWT's header.
func TokenKeyID(t *testing.T, token string) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil || len(parsed.Headers) != 1 {
		t.Fatalf("parse a token: %v", err)
	}
	return parsed.Headers[0].KeyID
}

// PublishedKeyIDs are the key IDs of the issuer's JWKS now.
func PublishedKeyIDs(ctx context.Context, t *testing.T, c *http.Client) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, CP.Auth.URL+"/keys", nil)
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
