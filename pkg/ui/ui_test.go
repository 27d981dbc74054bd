package ui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestServable: ichor-ui acts only for Ichor's and the OpenID provider's
// people, never a system: name, and with the Ichor role groups only.
func TestServable(t *testing.T) {
	for _, c := range []struct {
		user   string
		groups []string
		ok     bool
		want   []string
	}{
		{"ichor:dana", []string{"ichor:operator", "system:authenticated"}, true, []string{"ichor:operator"}},
		{"oidc:ada@example.net", []string{"ichor:admin", "ichor:admin", "ichor:viewer"}, true, []string{"ichor:admin", "ichor:viewer"}},
		{"oidc:bo@example.net", nil, true, nil},
		{"ichor:eve", []string{"system:masters", "ichor:viewer", "oidc:admins"}, true, []string{"ichor:viewer"}},
		{"system:admin", []string{"ichor:admin"}, false, nil},
		{"system:serviceaccount:ichor-system:ichor-ui", nil, false, nil},
		{"system:ichor:dana", nil, false, nil},
		{"dana", []string{"ichor:admin"}, false, nil},
		{"ichor:", []string{"ichor:admin"}, false, nil},
		{"", nil, false, nil},
	} {
		got, err := servable(authenticationv1.UserInfo{Username: c.user, Groups: c.groups})
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok %v", c.user, err, c.ok)
			continue
		}
		if c.ok && (got.User != c.user || !slices.Equal(got.Groups, c.want)) {
			t.Errorf("%q %v: acts as %+v, want groups %v", c.user, c.groups, got, c.want)
		}
	}
}

// TestSameOrigin: a state-changing request counts as the console's own only
// with its https origin, or, without an Origin, Sec-Fetch-Site same-origin.
func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, fetchSite string
		want              bool
	}{
		{"https://console.example.net", "", true},
		{"http://console.example.net", "", false},
		{"https://evil.example", "", false},
		{"https://console.example.net.evil.example", "", false},
		{"null", "", false},
		{"", "same-origin", true},
		{"", "cross-site", false},
		{"", "", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "https://console.example.net/logout", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", c.fetchSite)
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q: %v, want %v", c.origin, c.fetchSite, got, c.want)
		}
	}
}

// TestSessionsEnd: a session is found by its cookie until it expires, and
// never after it ended.
func TestSessionsEnd(t *testing.T) {
	s := newSessions()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	se := s.start(signedInAs{who: identity{User: "ichor:dana"}, renewAt: now.Add(time.Minute)}, false, now.Add(time.Hour))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: se.id})
	if got := s.get(r, now.Add(59*time.Minute)); got == nil || got.who.User != "ichor:dana" {
		t.Fatalf("the session before it expires: %+v", got)
	}
	if got := s.get(r, now.Add(time.Hour)); got != nil {
		t.Fatal("an expired session was found")
	}
	if got := s.get(r, now); got != nil {
		t.Fatal("an expired session came back")
	}
	other := s.start(signedInAs{who: identity{User: "ichor:vic"}, renewAt: now}, false, now.Add(time.Hour))
	s.end(other.id)
	r2 := httptest.NewRequest(http.MethodGet, "/", nil)
	r2.AddCookie(&http.Cookie{Name: sessionCookie, Value: other.id})
	if s.get(r2, now) != nil {
		t.Fatal("an ended session was found")
	}
	if se.id == other.id || se.csrf == other.csrf || len(se.id) < 43 {
		t.Fatalf("session ids and CSRF tokens must be fresh 256-bit values: %q %q", se.id, other.id)
	}
}

// TestValidNames: a path whose namespace, cluster or machine is not an
// object name is refused before any request.
func TestValidNames(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  bool
	}{
		{[]string{"demo", "prod", "m1"}, true},
		{[]string{"demo", "prod.eu-1"}, true},
		{[]string{"demo", ".."}, false},
		{[]string{"demo", "Prod"}, false},
		{[]string{"demo", ""}, false},
		{[]string{"demo", "a/b"}, false},
	} {
		if got := validNames(c.names...); got != c.want {
			t.Errorf("%q: %v, want %v", c.names, got, c.want)
		}
	}
}

// TestDescribe: the confirmation names what an operation does and every
// machine it acts on, those the type implies when it names none.
func TestDescribe(t *testing.T) {
	machines := []machineRow{{Name: "cp-1", Role: "controlplane"}, {Name: "worker-1", Role: "worker"}}
	two := int32(2)
	for _, c := range []struct {
		spec v1alpha1.TalosOperationSpec
		want string
	}{
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationReboot, Machines: []string{"worker-1"}},
			"reboots worker-1 of cluster web, one machine at a time"},
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationReboot, MaxUnavailable: &two},
			"reboots cp-1, worker-1 of cluster web, at most 2 workers at a time, control planes one at a time"},
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationTalosUpgrade, TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}},
			"upgrades Talos to v1.13.1 on cp-1, worker-1 of cluster web, one machine at a time"},
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationEtcdDefrag},
			"defragments etcd on cp-1 of cluster web, one machine at a time"},
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationKubernetesUpgrade, KubernetesUpgrade: &v1alpha1.KubernetesUpgradeParameters{Version: "v1.36.1"}},
			"upgrades Kubernetes to v1.36.1 on cp-1, worker-1 of cluster web"},
		{v1alpha1.TalosOperationSpec{ClusterName: "web", Type: v1alpha1.OperationNodeReset, Machines: []string{"worker-1"},
			NodeReset: &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeUserDisks}},
			"resets, wiping user-disks, worker-1 of cluster web, one machine at a time"},
	} {
		if got := describe(&v1alpha1.TalosOperation{Spec: c.spec}, machines); got != c.want {
			t.Errorf("%s: %q, want %q", c.spec.Type, got, c.want)
		}
	}
}

// TestParameterForms: the creation form fills every parameter block a type
// requires, only blocks of ichor.Operations, and its template has every
// input, labelled with the types it is for.
func TestParameterForms(t *testing.T) {
	described := map[string]bool{}
	for _, d := range ichor.Operations {
		for _, p := range d.Parameters {
			described[p.Field] = true
			if _, ok := parameterForms[p.Field]; !ok && p.Presence == ichor.ParameterRequired {
				t.Errorf("%s requires %s, which the console's creation form does not fill: add it to parameterForms", d.Type, p.Path())
			}
		}
	}
	page, err := os.ReadFile("templates/operations.html")
	if err != nil {
		t.Fatal(err)
	}
	inputs := []string{"maxUnavailable"}
	for field, form := range parameterForms {
		if !described[field] {
			t.Errorf("parameterForms fills spec.%s, a parameter of no operation type", field)
		}
		inputs = append(inputs, form.inputs...)
	}
	for _, in := range inputs {
		if !strings.Contains(string(page), `name="`+in+`"`) || !strings.Contains(string(page), `index .InputTypes "`+in+`"`) {
			t.Errorf("operations.html has no input %s labelled with its types", in)
		}
		if inputTypes[in] == "" {
			t.Errorf("input %s is for no type", in)
		}
	}
}

// TestOperationFrom: a creation form becomes the operation it asks for;
// what cannot be one is refused before any request, saying why.
func TestOperationFrom(t *testing.T) {
	form := func(v url.Values) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/clusters/ns/web/operations", strings.NewReader(v.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	op, err := operationFrom(form(url.Values{"type": {"talos-upgrade"}, "machines": {"worker-1", "cp-1"}, "version": {" v1.13.1 "}, "maxUnavailable": {"2"}}), "web")
	if err != nil {
		t.Fatal(err)
	}
	if op.GenerateName != "talos-upgrade-" || op.Spec.ClusterName != "web" || !slices.Equal(op.Spec.Machines, []string{"worker-1", "cp-1"}) ||
		op.Spec.TalosUpgrade == nil || op.Spec.TalosUpgrade.Version != "v1.13.1" || op.Spec.MaxUnavailable == nil || *op.Spec.MaxUnavailable != 2 {
		t.Errorf("the operation: %+v", op)
	}
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"type": {"format-c"}}, `type "format-c"`},
		{url.Values{"type": {"reboot"}, "machines": {"../cp-1"}}, `machine "../cp-1"`},
		{url.Values{"type": {"reboot"}, "maxUnavailable": {"many"}}, `maxUnavailable "many"`},
	} {
		if _, err := operationFrom(form(c.form), "web"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error about %s", c.form, err, c.want)
		}
	}
}

// TestPendingLoginsAreBounded: sign-ins started at the provider and not
// finished are bounded, taken once, and forgotten when they expire.
func TestPendingLoginsAreBounded(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	p := newProvider(OIDCOptions{IssuerURL: "https://idp.example.net", ClientID: "ichor-ui"}, func() time.Time { return now })
	for i := range maxPendingLogins {
		if err := p.remember(strconv.Itoa(i), pendingLogin{nonce: "n", expires: now.Add(oidcLoginTimeout)}); err != nil {
			t.Fatalf("sign-in %d: %v", i, err)
		}
	}
	if err := p.remember("one-more", pendingLogin{expires: now.Add(oidcLoginTimeout)}); err != errTooManyLogins {
		t.Fatalf("a sign-in beyond the bound: %v", err)
	}
	if l, ok := p.take("7"); !ok || l.nonce != "n" {
		t.Fatalf("take a pending sign-in: %v %+v", ok, l)
	}
	if _, ok := p.take("7"); ok {
		t.Fatal("a pending sign-in was taken twice")
	}
	now = now.Add(oidcLoginTimeout)
	if _, ok := p.take("8"); ok {
		t.Fatal("an expired sign-in was taken")
	}
	if err := p.remember("later", pendingLogin{expires: now.Add(oidcLoginTimeout)}); err != nil {
		t.Fatalf("a sign-in once the others expired: %v", err)
	}
}

// TestRenewBeforeTheTokenExpires: every request carries the person's own
// ID token, so a session is renewed before the token expires, whatever its
// lifetime: a minute before a long one, a fifth of a short one's life before.
func TestRenewBeforeTheTokenExpires(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	s := &Server{opts: Options{Now: func() time.Time { return now }}}
	for _, c := range []struct {
		life, want time.Duration
	}{
		{time.Hour, 59 * time.Minute},
		{10 * time.Minute, 9 * time.Minute},
		{2 * time.Minute, 96 * time.Second},
		{40 * time.Second, 32 * time.Second},
		{10 * time.Second, 8 * time.Second},
	} {
		at := s.renewAt(now.Add(c.life))
		if got := at.Sub(now); got != c.want {
			t.Errorf("a token living %s: renewed after %s, want %s", c.life, got, c.want)
		}
		if !at.Before(now.Add(c.life)) {
			t.Errorf("a token living %s is renewed only after it expired", c.life)
		}
	}
}
