package controller

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestWaitForAPIServesProbesUntilServed: before ichor.dev is served the
// controller stays alive and not ready, saying why; once it is served,
// waitForAPI returns and the probe address is free for the manager.
func TestWaitForAPIServesProbesUntilServed(t *testing.T) {
	var served atomic.Bool
	asked := make(chan struct{}, 100)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/ichor.dev/v1alpha1" {
			http.NotFound(w, r)
			return
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		if !served.Load() {
			http.Error(w, `{"kind":"Status","code":503}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: "ichor.dev/v1alpha1", APIResources: []metav1.APIResource{{Name: "talosmachines", Namespaced: true, Kind: "TalosMachine"}}})
	}))
	defer api.Close()

	o := NewOptions()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.HealthProbeBindAddress = ln.Addr().String()
	_ = ln.Close()
	done := make(chan error, 1)
	go func() { done <- o.waitForAPI(context.Background(), &rest.Config{Host: api.URL}) }()
	<-asked
	<-asked // the probes are up before the second poll
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + o.HealthProbeBindAddress + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "waiting for the kube-apiserver to serve ichor.dev/v1alpha1\n" {
		t.Errorf("/readyz while waiting: %d %q", code, body)
	}
	served.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + o.HealthProbeBindAddress + "/healthz"); err == nil {
		t.Error("the probe address is still served after the wait")
	}
}
