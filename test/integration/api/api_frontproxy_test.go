package api

import (
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/test/integration/itest"
)

// Someone who reaches ichor-apiserver itself, with a client certificate the
// cluster's client CA issued, cannot speak for another user through the
// front proxy's headers: only the request-header CA's front-proxy
// certificate may (package frontproxy keeps its verification, not the rule).
// Each is refused as the certificate's own user, before and after the real
// front proxy's requests have had their certificate verified.
func TestFrontProxyHeadersNeedTheFrontProxyCertificate(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	claim := func(rt http.RoundTripper) http.RoundTripper {
		return itest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set("X-Remote-User", "carol")
			req.Header["X-Remote-Group"] = []string{"ichor:admin", "system:masters"}
			return rt.RoundTrip(req)
		})
	}
	for _, who := range []string{
		"olivia",             // any user of the cluster
		"front-proxy-client", // the proxy's name, from the client CA instead of the request-header CA
	} {
		cfg, err := itest.CP.IchorDirectConfigFor(who)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Wrap(claim)
		_, err = itest.APIClientFor(t, cfg).IchorV1alpha1().TalosClusters(ns).Create(ctx, itest.APITalosCluster("forged", ns), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "`+who+`"`) {
			t.Errorf("%s claiming to be carol in ichor:admin and system:masters: want Forbidden as %s, got %v", who, who, err)
		}
		// The real front proxy, in between, speaks for carol.
		if _, err := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("carol through kube-apiserver: %v", err)
		}
	}
	if _, err := itest.APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, "forged", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a forged request stored its cluster: %v", err)
	}
}
