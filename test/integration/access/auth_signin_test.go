package access

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	authcmd "ichor.dev/ichor/pkg/cmd/auth"
	"ichor.dev/ichor/test/integration/itest"
)

// TestIchorUserSignIn: IchorUsers sign in with `ichor login` at Ichor's
// issuer and act through plain kubectl (the exec plugin) as ichor:<name>
// in the group of their role, within it and refused beyond it; every way
// in that should fail does, without telling whether a user exists.
func TestIchorUserSignIn(t *testing.T) {
	ctx := t.Context()
	ns := itest.CP.Namespace(t)
	itest.UseUsersEnabled(ctx, t, true)
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
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
		itest.CreateUser(ctx, t, name(u.name), v1alpha1.IchorUserSpec{Role: u.role, Disabled: u.disabled}, passwords[u.name])
	}
	stopAuth := itest.RunAuth(t, func(o *authcmd.Options) { o.TokenLifetime = itest.TokenLifetime })
	p := itest.NewPerson(t, ns)
	dana := name("dana")

	t.Run("an operator signs in and kubectl acts as her", func(t *testing.T) {
		p.Login(ctx, t, dana, passwords["dana"]).Ok(t, "ichor login", "Signed in", `Context "ichor:`+dana+`"`)
		who := p.Whoami(ctx, t)
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
		if out, err := p.Kubectl(ctx, "get", "talosmachines"); err != nil {
			t.Errorf("an operator lists machines: %v\n%s", err, out)
		}
		if out, err := p.Kubectl(ctx, "create", "namespace", "by-"+dana); err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, `"ichor:`+dana+`"`) {
			t.Errorf("an operator creates a namespace: %v\n%s", err, out)
		}
		if out, _ := p.Kubectl(ctx, "auth", "can-i", "start", "talosoperations", "--subresource=ca-rotation"); itest.LastLine(out) != "no" {
			t.Errorf("an operator may start a CA rotation: %s", out)
		}
		if out, _ := p.Kubectl(ctx, "auth", "can-i", "approve", "talosmachines", "--subresource=approval"); itest.LastLine(out) != "yes" {
			t.Errorf("an operator may not approve: %s", out)
		}
		// What is kept: the kubeconfig holds no secret; the session is the user's alone.
		s := p.SignIn(t, dana)
		kubeconfig, err := os.ReadFile(p.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for what, secret := range map[string]string{"token": s.IDToken, "refresh token": s.RefreshToken, "password": passwords["dana"]} {
			if bytes.Contains(kubeconfig, []byte(secret)) {
				t.Errorf("the kubeconfig holds the %s", what)
			}
		}
		for path, want := range map[string]os.FileMode{p.SignInPath(t, dana): 0o600, filepath.Dir(p.SignInPath(t, dana)): 0o700} {
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), want, err)
			}
		}
	})

	t.Run("the audit log names the sign-in and holds no password", func(t *testing.T) {
		found := false
		for _, e := range itest.AuditEvents(t) {
			for who, password := range passwords {
				if bytes.Contains(e.Raw, []byte(password)) {
					t.Errorf("the audit log holds %s's password, in a %s event of %s %s", who, e.Level, e.Verb, e.RequestURI)
				}
			}
			if e.ObjectRef.Subresource == "login" && e.ObjectRef.Name == dana && e.User.Username == itest.AuthUser {
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
		p.Login(ctx, t, name("vic"), "not the password at all").Fails(t, "a wrong password", answer)
		p.Login(ctx, t, name("nobody"), "not the password at all").Fails(t, "an unknown user", answer)
		p.Login(ctx, t, name("nopw"), "not the password at all").Fails(t, "a user without a password", answer)
		// Knowing the password, a disabled user learns it is disabled.
		p.Login(ctx, t, name("off"), passwords["off"]).Fails(t, "a disabled user", "the user is disabled")
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
		from := itest.SourceClient(t, "127.0.0.2")
		for i := range 5 {
			if code, body := itest.PasswordGrant(ctx, t, from, name("rita"), "guess number "+string(rune('a'+i))); code != http.StatusBadRequest {
				t.Fatalf("guess %d: %d %s", i+1, code, body)
			}
		}
		// The right password, now, is not even checked.
		code, body := itest.PasswordGrant(ctx, t, from, name("rita"), passwords["rita"])
		if code != http.StatusTooManyRequests || !strings.Contains(body, "too many sign-in attempts") {
			t.Fatalf("the sixth attempt: %d %s", code, body)
		}
		// The same from another address: the user's bucket is empty too.
		if code, body := itest.PasswordGrant(ctx, t, itest.SourceClient(t, "127.0.0.3"), name("rita"), passwords["rita"]); code != http.StatusTooManyRequests {
			t.Fatalf("from another address: %d %s", code, body)
		}
	})

	t.Run("tokens the issuer did not sign for kube-apiserver are refused", func(t *testing.T) {
		u, err := users.Get(ctx, dana, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key, kid := itest.IssuerSigningKey(ctx, t)
		now := time.Now()
		good := map[string]any{"iss": itest.CP.Auth.URL, "sub": dana, "aud": "ichor", "exp": now.Add(time.Minute).Unix(),
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
		if who, err := itest.ReviewToken(ctx, itest.SignToken(t, key, kid, good)); err != nil || who.Username != "ichor:"+dana {
			t.Fatalf("a token like the issuer's: %+v %v", who, err)
		}
		forged, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for what, token := range map[string]string{
			"a forged signature":            itest.SignToken(t, forged, kid, good),
			"another audience":              itest.SignToken(t, key, kid, with(map[string]any{"aud": "kubernetes"})),
			"an expired token":              itest.SignToken(t, key, kid, with(map[string]any{"exp": now.Add(-2 * time.Minute).Unix(), "iat": now.Add(-3 * time.Minute).Unix(), "nbf": now.Add(-3 * time.Minute).Unix()})),
			"another issuer":                itest.SignToken(t, key, kid, with(map[string]any{"iss": itest.CP.OIDC.URL})),
			"a role system:masters":         itest.SignToken(t, key, kid, with(map[string]any{"role": "masters", "groups": []string{"system:masters"}})),
			"a subject system:admin":        itest.SignToken(t, key, kid, with(map[string]any{"sub": "system:admin"})),
			"groups system:masters claimed": itest.SignToken(t, key, kid, with(map[string]any{"groups": []string{"system:masters"}, "role": nil})),
		} {
			who, err := itest.ReviewToken(ctx, token)
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: %+v, %v; want Unauthorized", what, who, err)
			}
		}
		// And a token whose groups claim names system:masters beside a
		// real role gets the role's group only.
		who, err := itest.ReviewToken(ctx, itest.SignToken(t, key, kid, with(map[string]any{"groups": []string{"system:masters"}})))
		if err != nil || slices.Contains(who.Groups, "system:masters") {
			t.Errorf("a groups claim beside the role: %+v %v", who, err)
		}
	})

	t.Run("a refresh token renews once; replayed or after logout it renews nothing", func(t *testing.T) {
		s := p.SignIn(t, dana)
		code, body := itest.RefreshGrant(ctx, t, s.RefreshToken)
		if code != http.StatusOK {
			t.Fatalf("renew: %d %s", code, body)
		}
		var renewed struct {
			Refresh string `json:"refresh_token"`
		}
		if err := json.Unmarshal([]byte(body), &renewed); err != nil || renewed.Refresh == "" || renewed.Refresh == s.RefreshToken {
			t.Fatalf("renewed: %s %v", body, err)
		}
		if code, body := itest.RefreshGrant(ctx, t, s.RefreshToken); code != http.StatusBadRequest || !strings.Contains(body, "already used") {
			t.Fatalf("a replayed refresh token: %d %s", code, body)
		}
		// The replay ended the session: the new token renews nothing either.
		if code, body := itest.RefreshGrant(ctx, t, renewed.Refresh); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
			t.Fatalf("the token after a replay: %d %s", code, body)
		}
		r := p.Ichor(ctx, t, nil, "auth", "token", "--issuer", itest.CP.Auth.URL, "--username", dana)
		r.Fails(t, "auth token after the session ended", "your Ichor session has ended", "ichor login --issuer "+itest.CP.Auth.URL)

		// Sign in again, then out.
		p.Login(ctx, t, dana, passwords["dana"]).Ok(t, "ichor login again")
		s = p.SignIn(t, dana)
		p.Ichor(ctx, t, nil, "logout", "--issuer", itest.CP.Auth.URL, "--username", dana).Ok(t, "ichor logout", "Signed out")
		if code, body := itest.RefreshGrant(ctx, t, s.RefreshToken); code != http.StatusBadRequest {
			t.Fatalf("a refresh token after logout: %d %s", code, body)
		}
		if _, err := os.Stat(p.SignInPath(t, dana)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the session is still kept after logout: %v", err)
		}
		if out, err := p.Kubectl(ctx, "get", "talosmachines"); err == nil || !strings.Contains(out, "not signed in") {
			t.Errorf("kubectl after logout: %v\n%s", err, out)
		}
	})

	t.Run("a disabled user is locked out within the token lifetime", func(t *testing.T) {
		p.Login(ctx, t, dana, passwords["dana"]).Ok(t, "ichor login")
		token := p.SignIn(t, dana).IDToken
		if _, err := itest.ReviewToken(ctx, token); err != nil {
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
		r := p.Ichor(ctx, t, nil, "auth", "token", "--issuer", itest.CP.Auth.URL, "--username", dana)
		r.Fails(t, "auth token of a disabled user", "the user is disabled")
		// The last token works until it expires, and not after.
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, itest.TokenLifetime+time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := itest.ReviewToken(ctx, token)
			return apierrors.IsUnauthorized(err), nil
		}); err != nil {
			t.Fatalf("the disabled user's token still works %s later", time.Since(disabledAt))
		}
		if after := time.Since(disabledAt); after > itest.TokenLifetime+15*time.Second {
			t.Errorf("locked out %s after being disabled; the token lifetime is %s", after, itest.TokenLifetime)
		}
	})

	t.Run("a password change ends the sessions begun before it", func(t *testing.T) {
		vic := name("vic")
		p.Login(ctx, t, vic, passwords["vic"]).Ok(t, "ichor login")
		passwords["vic"] = "a new password for vic"
		if _, err := users.UpdatePassword(ctx, vic, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: vic}, Password: passwords["vic"]}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := p.Ichor(ctx, t, nil, "auth", "token", "--issuer", itest.CP.Auth.URL, "--username", vic)
		r.Fails(t, "auth token after the password changed", "the user's password changed")
		p.Login(ctx, t, vic, passwords["vic"]).Ok(t, "ichor login with the new password")
	})

	t.Run("with the issuer down, issued tokens keep working and sign-in fails clearly", func(t *testing.T) {
		eve := name("eve")
		p.Login(ctx, t, eve, passwords["eve"]).Ok(t, "ichor login")
		token := p.SignIn(t, eve).IDToken
		stopAuth()
		// kube-apiserver verifies with the keys it has.
		if who, err := itest.ReviewToken(ctx, token); err != nil || who.Username != "ichor:"+eve {
			t.Errorf("an issued token with the issuer down: %+v %v", who, err)
		}
		// The exec plugin cannot renew it, says so, and hands out the token while it lasts.
		r := p.Ichor(ctx, t, nil, "auth", "token", "--issuer", itest.CP.Auth.URL, "--username", eve)
		r.Ok(t, "auth token with the issuer down", `"token":"`+token+`"`)
		if !strings.Contains(r.Stderr, "cannot reach the issuer at "+itest.CP.Auth.URL) {
			t.Errorf("auth token does not say the issuer is down: %s", r.Stderr)
		}
		p.Login(ctx, t, eve, passwords["eve"]).Fails(t, "ichor login with the issuer down", "cannot reach the issuer at "+itest.CP.Auth.URL)
	})
}

// TestIssuerKeyRotation: ichor-auth rotates its signing key; every token it
// signs names a key it published before, and kube-apiserver accepts tokens
// of the old key and of the new one.
func TestIssuerKeyRotation(t *testing.T) {
	ctx := t.Context()
	ns := itest.CP.Namespace(t)
	itest.UseUsersEnabled(ctx, t, true)
	name := "kim-" + ns
	const password = "kim's long password"
	itest.CreateUser(ctx, t, name, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, password)
	itest.RunAuth(t, func(o *authcmd.Options) {
		o.TokenLifetime, o.KeyRotation, o.KeyLead = 30*time.Second, 15*time.Second, 3*time.Second
	})
	c := itest.IssuerHTTPClient(t)
	code, body := itest.PasswordGrant(ctx, t, c, name, password)
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
	firstKid := itest.TokenKeyID(t, first)
	// Renew until a token is signed by another key, checking each against
	// the keys published before it was asked for.
	var second string
	last := first
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		published := itest.PublishedKeyIDs(ctx, t, c)
		code, body := itest.RefreshGrant(ctx, t, resp.Refresh)
		if code != http.StatusOK {
			return false, fmt.Errorf("renew: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			return false, err
		}
		kid := itest.TokenKeyID(t, resp.IDToken)
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
		expiry := itest.TokenExpiry(t, token)
		wg.Go(func() {
			var who authenticationv1.UserInfo
			var err error
			if pollErr := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Until(expiry), true, func(ctx context.Context) (bool, error) {
				who, err = itest.ReviewToken(ctx, token)
				return err == nil && who.Username == "ichor:"+name, nil
			}); pollErr != nil {
				t.Errorf("%s: not accepted within its lifetime: %+v %v", what, who, err)
			}
		})
	}
	wg.Wait()
}
