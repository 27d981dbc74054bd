package lifecycle

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerMetricsNeedTLSAndAuthorization: ichor-controller serves its
// metrics over HTTPS only, with its serving certificate, and only to a
// caller kube-apiserver authenticates and allows to get /metrics: a plain
// HTTP request, a request without a token and the token of a
// ServiceAccount without ichor-metrics-reader are refused; the same
// ServiceAccount bound to ichor-metrics-reader reads Ichor's own metrics.
func TestControllerMetricsNeedTLSAndAuthorization(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	addr := itest.FreeLoopbackAddress(t)
	itest.StartController(t, func(o *ctrlcmd.Options) {
		o.MetricsBindAddress = addr
		o.MetricsCertFile, o.MetricsKeyFile = itest.CP.ControllerUpload.CertFile, itest.CP.ControllerUpload.KeyFile
	})

	httpsClient := itest.ControllerMetricsClient(t)
	get := func(c *http.Client, url, token string) (int, string) {
		t.Helper()
		return itest.GetWithToken(ctx, t, c, url, token)
	}

	// The endpoint comes up with the manager; until then, nothing answers.
	url := "https://" + addr + "/metrics"
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body = get(httpsClient, url, "")
		return code != 0, nil
	}); err != nil {
		t.Fatalf("the metrics endpoint never answered: %s", body)
	}
	if code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d %s", code, body)
	}
	if code, body := get(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/metrics", ""); code == http.StatusOK || strings.Contains(body, "ichor_") {
		t.Fatalf("plain HTTP: %d %s", code, body)
	}

	token := itest.ServiceAccountToken(ctx, t, ns, "prometheus")
	if code, body := get(httpsClient, url, token); code != http.StatusForbidden {
		t.Fatalf("a ServiceAccount without ichor-metrics-reader: %d %s", code, body)
	}

	itest.BindClusterRole(ctx, t, ns, "prometheus", "ichor-metrics-reader")
	// The endpoint keeps a refusal for a while (its authorizer's cache):
	// poll until the binding is seen.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		code, body = get(httpsClient, url, token)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("with ichor-metrics-reader: %d %s", code, body)
	}
	for _, metric := range []string{"controller_runtime_reconcile_total", "controller_runtime_active_workers"} {
		if !strings.Contains(body, metric) {
			t.Errorf("the metrics lack %s", metric)
		}
	}
}
