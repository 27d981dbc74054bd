package frontproxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"ichor.dev/ichor/pkg/pki"
)

// bundle is a request-header CA bundle whose content a test can replace, as
// the extension-apiserver-authentication ConfigMap's can be.
type bundle struct {
	dynamiccertificates.CAContentProvider
	opts atomic.Pointer[x509.VerifyOptions]
}

func newBundle(t *testing.T, cas ...*pki.CA) *bundle {
	b := &bundle{}
	b.set(t, cas...)
	return b
}

func (b *bundle) set(t *testing.T, cas ...*pki.CA) {
	t.Helper()
	opts := x509request.DefaultVerifyOptions()
	opts.Roots = x509.NewCertPool()
	for _, ca := range cas {
		opts.Roots.AddCert(ca.Cert)
	}
	b.opts.Store(&opts)
}

func (b *bundle) VerifyOptions() (x509.VerifyOptions, bool) { return *b.opts.Load(), true }

// next stands for the delegated authenticator: it says who it would have
// taken the request for.
type next struct{ calls int }

func (n *next) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	n.calls++
	return &authenticator.Response{User: &user.DefaultInfo{Name: "decided-by-next"}}, true, nil
}

func issue(t *testing.T, ca *pki.CA, cn string, validity time.Duration) *x509.Certificate {
	t.Helper()
	kp, err := ca.Issue(pki.Leaf{CommonName: cn, Usage: pki.ClientAuth, Validity: validity})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kp.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func newCA(t *testing.T, cn string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(cn)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func request(cert *x509.Certificate, headers map[string][]string) *http.Request {
	req := &http.Request{Header: http.Header{}, TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
	for k, v := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	return req
}

var proxied = map[string][]string{"X-Remote-User": {"alice"}, "X-Remote-Group": {"ichor:operators"}, "X-Remote-Extra-Scopes": {"a"}}

type fixture struct {
	proxyCA, otherCA *pki.CA
	bundle           *bundle
	next             *next
	now              time.Time
	a                *authn
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{proxyCA: newCA(t, "front-proxy-ca"), otherCA: newCA(t, "client-ca"), next: &next{}, now: time.Now()}
	f.bundle = newBundle(t, f.proxyCA)
	cfg := &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		CAContentProvider:   f.bundle,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy-client"},
	}
	f.a = newAuthn(cfg, f.next, func() time.Time { return f.now })
	return f
}

// who authenticates req and returns the user's name and groups, and
// whether next decided.
func (f *fixture) who(t *testing.T, req *http.Request) (string, []string, bool) {
	t.Helper()
	before := f.next.calls
	resp, ok, err := f.a.AuthenticateRequest(req)
	if err != nil || !ok {
		t.Fatalf("not authenticated: %v %v", ok, err)
	}
	return resp.User.GetName(), resp.User.GetGroups(), f.next.calls > before
}

func TestProxiedRequestIsTakenByItsHeaders(t *testing.T) {
	f := newFixture(t)
	cert := issue(t, f.proxyCA, "front-proxy-client", time.Hour)
	for i := range 2 {
		req := request(cert, proxied)
		name, groups, byNext := f.who(t, req)
		if byNext || name != "alice" || !slices.Equal(groups, []string{"ichor:operators", user.AllAuthenticated}) {
			t.Fatalf("request %d: got %s %v (by next: %v), want alice in ichor:operators and system:authenticated", i, name, groups, byNext)
		}
		if req.Header.Get("X-Remote-User") != "" || req.Header.Get("X-Remote-Extra-Scopes") != "" {
			t.Errorf("request %d: the identity headers were left for the handlers: %v", i, req.Header)
		}
	}
	if len(f.a.verified) != 1 {
		t.Errorf("%d chains kept, want the proxy's one", len(f.a.verified))
	}
}

// Everything that is not a proxied request of the front proxy is decided
// by the delegated authenticator, as it would have been without this one.
func TestOthersAreDecidedByTheDelegatedAuthenticator(t *testing.T) {
	f := newFixture(t)
	proxy := issue(t, f.proxyCA, "front-proxy-client", time.Hour)
	for name, req := range map[string]*http.Request{
		// A client certificate of the cluster's client CA, named as the proxy.
		"the proxy's name from another CA": request(issue(t, f.otherCA, "front-proxy-client", time.Hour), proxied),
		// The request-header CA's certificate of another name.
		"another name from the proxy's CA": request(issue(t, f.proxyCA, "mallory", time.Hour), proxied),
		// The proxy itself, with no user to speak for.
		"the proxy without a user header": request(proxy, map[string][]string{"X-Remote-Group": {"system:masters"}}),
		"no client certificate":           {Header: http.Header{"X-Remote-User": {"alice"}}, TLS: &tls.ConnectionState{}},
		"no TLS":                          {Header: http.Header{"X-Remote-User": {"alice"}}},
	} {
		if who, _, byNext := f.who(t, req); !byNext || who != "decided-by-next" {
			t.Errorf("%s: taken as %s, want the delegated authenticator to decide", name, who)
		}
	}
}

// A verified chain is relied on only while the CA bundle is the same, every
// certificate of it is valid, and for at most checkTTL.
func TestAVerificationIsReliedOnWhileItHolds(t *testing.T) {
	t.Run("the bundle no longer has the proxy's CA", func(t *testing.T) {
		f := newFixture(t)
		cert := issue(t, f.proxyCA, "front-proxy-client", time.Hour)
		if _, _, byNext := f.who(t, request(cert, proxied)); byNext {
			t.Fatal("the proxy was not taken")
		}
		f.bundle.set(t, f.otherCA)
		if who, _, byNext := f.who(t, request(cert, proxied)); !byNext {
			t.Errorf("taken as %s after its CA left the bundle", who)
		}
	})
	t.Run("the certificate expired", func(t *testing.T) {
		f := newFixture(t)
		cert := issue(t, f.proxyCA, "front-proxy-client", 2*time.Minute)
		if _, _, byNext := f.who(t, request(cert, proxied)); byNext {
			t.Fatal("the proxy was not taken")
		}
		f.now = cert.NotAfter.Add(time.Second)
		if who, _, byNext := f.who(t, request(cert, proxied)); !byNext {
			t.Errorf("taken as %s after the certificate expired", who)
		}
	})
	t.Run("a minute passed", func(t *testing.T) {
		f := newFixture(t)
		cert := issue(t, f.proxyCA, "front-proxy-client", time.Hour)
		f.who(t, request(cert, proxied))
		first := f.a.verified[string(cert.Raw)].until
		f.now = f.now.Add(checkTTL)
		if _, _, byNext := f.who(t, request(cert, proxied)); byNext {
			t.Fatal("the proxy was not taken")
		}
		if again := f.a.verified[string(cert.Raw)].until; !again.After(first) {
			t.Errorf("the check was not made again after %v (until %v, then %v)", checkTTL, first, again)
		}
	})
	t.Run("other intermediates", func(t *testing.T) {
		f := newFixture(t)
		cert := issue(t, f.proxyCA, "front-proxy-client", time.Hour)
		f.who(t, request(cert, proxied))
		req := request(cert, proxied)
		req.TLS.PeerCertificates = append(req.TLS.PeerCertificates, f.otherCA.Cert)
		if _, _, byNext := f.who(t, req); byNext {
			t.Fatal("the proxy was not taken")
		}
		if got := f.a.verified[string(cert.Raw)].intermediates; len(got) != 1 {
			t.Errorf("the chain with an intermediate was not verified on its own: kept %d intermediates", len(got))
		}
	})
}
