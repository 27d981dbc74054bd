package issuer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorfake "ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// issuerFixture is an issuer on fake clients, with a clock the test moves,
// counting the reads of its sessions Secret.
type issuerFixture struct {
	t     *testing.T
	i     *Issuer
	kube  *kubefake.Clientset
	mu    sync.Mutex
	clock time.Time
	reads int // GETs of the sessions Secret
}

func newIssuerFixture(t *testing.T) *issuerFixture {
	t.Helper()
	f := &issuerFixture{t: t, clock: time.Now()}
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ichor-system"}}
	}
	f.kube = kubefake.NewClientset(secret("ichor-auth-keys"), secret("ichor-auth-sessions"))
	f.kube.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "ichor-auth-sessions" {
			f.mu.Lock()
			f.reads++
			f.mu.Unlock()
		}
		return false, nil, nil
	})
	ichor := ichorfake.NewClientset(
		&v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: "dana", UID: "uid-dana"}, Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleOperator}},
		&v1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
			Spec: v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{UsersEnabled: true}}},
	)
	i, err := New(Config{URL: "https://issuer.test", Audience: "ichor", TokenLifetime: 5 * time.Minute, SessionLifetime: time.Hour,
		KeyRotation: 7 * 24 * time.Hour, KeyLead: time.Hour, Namespace: "ichor-system", KeysSecret: "ichor-auth-keys",
		SessionsSecret: "ichor-auth-sessions", Kube: f.kube, Ichor: ichor})
	if err != nil {
		t.Fatal(err)
	}
	i.now = f.now
	if err := i.SyncKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.i = i
	return f
}

func (f *issuerFixture) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock
}

func (f *issuerFixture) advance(d time.Duration) {
	f.mu.Lock()
	f.clock = f.clock.Add(d)
	f.mu.Unlock()
}

func (f *issuerFixture) secretReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// startSession writes a session of dana into the Secret as another
// replica would, and returns its refresh token.
func (f *issuerFixture) startSession() string {
	f.t.Helper()
	var token string
	err := f.i.sessions.update(context.Background(), func(data []byte) ([]byte, error) {
		s, err := parseSessions(data)
		if err != nil {
			return nil, err
		}
		if _, token, err = s.start("dana", "uid-dana", time.Time{}, f.now(), time.Hour); err != nil {
			return nil, err
		}
		return json.Marshal(s)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return token
}

// post sends form to path from address, and returns the status and body.
func (f *issuerFixture) post(path, from string, form url.Values) (int, string) {
	f.t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = from + ":40000"
	w := httptest.NewRecorder()
	f.i.Handler().ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func (f *issuerFixture) refresh(from, token string) (int, string) {
	return f.post(TokenPath, from, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}})
}

func (f *issuerFixture) revoke(from, token string) (int, string) {
	return f.post(RevokePath, from, url.Values{"token": {token}})
}

// madeUp is a refresh token of the right shape that renews no session.
func madeUp(n int) string {
	return fmt.Sprintf("%022d.%043d", n, n)
}

// TestRenewalFloodCostsNoReads: refreshes and revocations with tokens that
// renew no session, from many addresses at once, cost at most one read of
// the sessions Secret a second; a session another replica started is found
// once a second has passed, and a token the copy knows is decided on a
// fresh read (a replay at another replica ends the session here too).
func TestRenewalFloodCostsNoReads(t *testing.T) {
	f := newIssuerFixture(t)
	for n := range 200 {
		from := fmt.Sprintf("10.0.%d.%d", n/250, n%250+1)
		if code, body := f.refresh(from, madeUp(n)); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
			t.Fatalf("refresh %d with a made-up token: %d %s", n, code, body)
		}
		if code, _ := f.revoke(from, madeUp(n)); code != http.StatusOK {
			t.Fatalf("revoke %d with a made-up token: %d", n, code)
		}
	}
	if reads := f.secretReads(); reads > 1 {
		t.Errorf("400 requests with made-up tokens read the sessions Secret %d times, want at most once", reads)
	}

	// Another replica starts a session: refused here until the copy is a
	// second old, then found.
	token := f.startSession()
	f.advance(rereadEvery)
	code, body := f.refresh("10.1.0.1", token)
	if code != http.StatusOK {
		t.Fatalf("a session another replica started, a second later: %d %s", code, body)
	}
	var renewed tokenResponse
	if err := json.Unmarshal([]byte(body), &renewed); err != nil || renewed.RefreshToken == "" {
		t.Fatalf("renewed: %s %v", body, err)
	}

	// Another replica renews it again; the token it replaced, presented
	// here where the copy still takes it for the current one, is a replay.
	err := f.i.sessions.update(context.Background(), func(data []byte) ([]byte, error) {
		s, err := parseSessions(data)
		if err != nil {
			return nil, err
		}
		if _, _, _, err := s.renew(renewed.RefreshToken, f.now()); err != nil {
			return nil, err
		}
		return json.Marshal(s)
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := f.refresh("10.1.0.1", renewed.RefreshToken); code != http.StatusBadRequest || !strings.Contains(body, "already used") {
		t.Fatalf("a token another replica replaced: %d %s", code, body)
	}
}

// TestRenewalsAreLimitedPerSource: refreshes and revocations from one
// address share a bucket of renewalBurst, refilled one every renewalEvery,
// apart from sign-ins; another address is not limited.
func TestRenewalsAreLimitedPerSource(t *testing.T) {
	f := newIssuerFixture(t)
	for n := range renewalBurst {
		send := f.refresh
		if n%2 == 1 {
			send = f.revoke
		}
		if code, body := send("10.0.0.9", madeUp(n)); code == http.StatusTooManyRequests {
			t.Fatalf("request %d limited: %s", n+1, body)
		}
	}
	for _, send := range []func(string, string) (int, string){f.refresh, f.revoke} {
		code, body := send("10.0.0.9", madeUp(0))
		if code != http.StatusTooManyRequests || !strings.Contains(body, "too many session renewals") {
			t.Fatalf("over the limit: %d %s", code, body)
		}
	}
	if code, _ := f.refresh("10.0.0.10", madeUp(0)); code == http.StatusTooManyRequests {
		t.Error("another address is limited")
	}
	f.advance(renewalEvery)
	if code, _ := f.refresh("10.0.0.9", madeUp(0)); code == http.StatusTooManyRequests {
		t.Error("limited after a refill")
	}
}
