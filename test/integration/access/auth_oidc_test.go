package access

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/oidcprovider"
)

// TestOIDCSignIn: people of the company's OpenID provider sign in with
// `ichor login --oidc`, in a browser (authorization code with PKCE) or with
// the device flow, and kubectl acts as oidc:<email> in the ichor: groups
// their provider groups give, and no other.
func TestOIDCSignIn(t *testing.T) {
	ctx := t.Context()
	ns := itest.CP.Namespace(t)
	person := func(name string) oidcprovider.Person { return itest.OIDCPerson(t, name) }

	t.Run("in a browser: an operator", func(t *testing.T) {
		p := itest.NewPerson(t, ns)
		olga := person("olga")
		login := p.StartIchor(ctx, t, "login", "--oidc", "--issuer", itest.CP.OIDC.URL, "--issuer-certificate-authority", itest.CP.OIDC.CAFile, "--no-browser")
		authURL := login.Await(t, regexp.MustCompile(`https://\S+/auth\?\S+`))
		itest.SignInAtProvider(ctx, t, authURL, olga)
		login.Wait(t).Ok(t, "ichor login --oidc", "Signed in", `Context "oidc:`+olga.Email+`"`)
		who := p.Whoami(ctx, t)
		if who.Username != "oidc:"+olga.Email || !slices.Contains(who.Groups, "ichor:operator") {
			t.Fatalf("kubectl auth whoami: %+v", who)
		}
		for _, g := range who.Groups {
			if g != "ichor:operator" && g != "system:authenticated" {
				t.Errorf("group %q beyond the mapped ones", g)
			}
		}
		if out, err := p.Kubectl(ctx, "get", "talosmachines"); err != nil {
			t.Errorf("an operator lists machines: %v\n%s", err, out)
		}
		if out, _ := p.Kubectl(ctx, "auth", "can-i", "create", "ichorusers.ichor.dev"); itest.LastLine(out) != "no" {
			t.Errorf("an operator may create IchorUsers: %s", out)
		}

		// The exec plugin renews the token with the provider's refresh token.
		path := p.SignInPathFor(t, "client:"+oidcprovider.ClientID)
		before := p.SignInAt(t, path)
		itest.Expire(t, path)
		r := p.Ichor(ctx, t, nil, "auth", "token", "--oidc", "--issuer", itest.CP.OIDC.URL, "--username", olga.Email)
		r.Ok(t, "auth token, renewed")
		after := p.SignInAt(t, path)
		if after.IDToken == before.IDToken || !strings.Contains(r.Stdout, after.IDToken) {
			t.Error("the token was not renewed")
		}
		if who := p.Whoami(ctx, t); who.Username != "oidc:"+olga.Email {
			t.Errorf("after renewal: %+v", who)
		}
		p.Ichor(ctx, t, nil, "logout", "--oidc", "--issuer", itest.CP.OIDC.URL, "--username", olga.Email).Ok(t, "ichor logout --oidc", "Signed out")
		if out, err := p.Kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "not signed in") {
			t.Errorf("kubectl after logout: %v\n%s", err, out)
		}
	})

	t.Run("with the device flow: groups that name nothing of Ichor's give nothing", func(t *testing.T) {
		p := itest.NewPerson(t, ns)
		pat := person("pat")
		login := p.StartIchor(ctx, t, "login", "--oidc", "--device", "--issuer", itest.CP.OIDC.URL, "--issuer-certificate-authority", itest.CP.OIDC.CAFile)
		code := login.Await(t, regexp.MustCompile(`(?m)^\s+([A-Z0-9]{4}-[A-Z0-9]{4})\s*$`))
		itest.ConfirmDevice(ctx, t, strings.TrimSpace(code), pat)
		login.Wait(t).Ok(t, "ichor login --oidc --device", "Signed in", "oidc:"+pat.Email)
		who := p.Whoami(ctx, t)
		if who.Username != "oidc:"+pat.Email {
			t.Fatalf("kubectl auth whoami: %+v", who)
		}
		// pat's provider claims system:masters and developers: neither maps.
		if !slices.Equal(who.Groups, []string{"system:authenticated"}) {
			t.Errorf("groups %v, want system:authenticated alone", who.Groups)
		}
		if out, err := p.Kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("someone without an Ichor group lists machines: %v\n%s", err, out)
		}
	})

	t.Run("an unverified email is refused by kube-apiserver", func(t *testing.T) {
		p := itest.NewPerson(t, ns)
		una := person("una")
		login := p.StartIchor(ctx, t, "login", "--oidc", "--issuer", itest.CP.OIDC.URL, "--issuer-certificate-authority", itest.CP.OIDC.CAFile, "--no-browser")
		itest.SignInAtProvider(ctx, t, login.Await(t, regexp.MustCompile(`https://\S+/auth\?\S+`)), una)
		r := login.Wait(t)
		r.Ok(t, "ichor login --oidc as una")
		if !strings.Contains(r.Stderr, "has not verified una@example.com") {
			t.Errorf("no warning about the unverified email: %s", r.Stderr)
		}
		token := p.SignInAt(t, p.SignInPathFor(t, "client:"+oidcprovider.ClientID)).IDToken
		if who, err := itest.ReviewToken(ctx, token); !apierrors.IsUnauthorized(err) {
			t.Errorf("una's token with an unverified email: %+v %v", who, err)
		}
	})

	t.Run("a wrong password at the provider signs no one in", func(t *testing.T) {
		p := itest.NewPerson(t, ns)
		olga := person("olga")
		olga.Password = "not olga's password"
		login := p.StartIchor(ctx, t, "login", "--oidc", "--issuer", itest.CP.OIDC.URL, "--issuer-certificate-authority", itest.CP.OIDC.CAFile, "--no-browser")
		authURL := login.Await(t, regexp.MustCompile(`https://\S+/auth\?\S+`))
		c := itest.ProviderClient(t)
		loginURL := itest.FollowTo(ctx, t, c, authURL, "/login/username")
		resp := itest.PostProvider(ctx, t, c, itest.CP.OIDC.URL+"/login/username", url.Values{"id": {loginURL.Query().Get("authRequestID")},
			"username": {olga.Username}, "password": {olga.Password}})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" {
			t.Errorf("a wrong password: %s to %q", resp.Status, resp.Header.Get("Location"))
		}
		login.Cancel()
		if _, err := os.Stat(filepath.Join(p.Home, ".ichor", "tokens")); err == nil {
			if matches, _ := filepath.Glob(filepath.Join(p.Home, ".ichor", "tokens", "*.json")); len(matches) > 0 {
				t.Errorf("a sign-in was kept: %v", matches)
			}
		}
	})
}
