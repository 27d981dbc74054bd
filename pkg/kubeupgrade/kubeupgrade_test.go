package kubeupgrade

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		refused  string
	}{
		{"v1.35.2", "v1.36.0", ""},
		{"v1.36.0", "v1.36.0", ""},
		{"v1.36.0", "v1.36.3", ""},
		{"v1.35.2", "v1.37.0", "one minor version at a time: from 1.35 go to 1.36 first"},
		{"v1.36.1", "v1.36.0", "does not downgrade"},
		{"v1.36.0", "v1.35.0", "does not downgrade"},
		{"v1.36.0", "v2.0.0", "one minor version at a time"},
		{"v1.36.0", "latest", `target Kubernetes version "latest"`},
	} {
		err := CheckPath(tc.from, tc.to)
		if (err == nil) != (tc.refused == "") || (err != nil && !strings.Contains(err.Error(), tc.refused)) {
			t.Errorf("CheckPath(%s, %s) = %v, want refusal %q", tc.from, tc.to, err, tc.refused)
		}
	}
}

func TestRemoved(t *testing.T) {
	if got := Removed("v1.31.4", "v1.32.0"); len(got) != 1 || got[0].Resource != "podschedulingcontexts" {
		t.Errorf("1.31 -> 1.32 removes %v, want podschedulingcontexts", got)
	}
	if got := Removed("v1.32.0", "v1.32.4"); len(got) != 0 {
		t.Errorf("a patch upgrade removes %v", got)
	}
	if got := Removed("v1.35.2", "v1.36.0"); len(got) != 0 {
		t.Errorf("1.35 -> 1.36 removes %v", got)
	}
}

// TestStillUsed asks a served API server for the objects of removed
// resources: a served resource with objects is named; one served without
// objects, or not served at all, is not.
func TestStillUsed(t *testing.T) {
	holds := true
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/resource.k8s.io/v1alpha3":
			fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"resource.k8s.io/v1alpha3","resources":[
				{"name":"podschedulingcontexts","namespaced":true,"kind":"PodSchedulingContext","verbs":["list"]}]}`)
		case "/apis/resource.k8s.io/v1alpha3/podschedulingcontexts":
			if r.URL.Query().Get("limit") != "1" {
				http.Error(w, "want limit=1", http.StatusBadRequest)
				return
			}
			items := `[]`
			if holds {
				items = `[{"metadata":{"name":"mine","namespace":"default"}}]`
			}
			fmt.Fprintf(w, `{"kind":"PodSchedulingContextList","apiVersion":"resource.k8s.io/v1alpha3","items":%s}`, items)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(t, srv)}}
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	used, err := StillUsed(t.Context(), d, "v1.31.4", "v1.32.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != 1 || used[0] != "podschedulingcontexts.v1alpha3.resource.k8s.io" {
		t.Errorf("StillUsed = %v, want the podschedulingcontexts holding an object", used)
	}
	holds = false
	if used, err := StillUsed(t.Context(), d, "v1.31.4", "v1.32.0"); err != nil || len(used) != 0 {
		t.Errorf("StillUsed without objects = %v, %v", used, err)
	}
	if used, err := StillUsed(t.Context(), d, "v1.35.0", "v1.36.0"); err != nil || len(used) != 0 {
		t.Errorf("StillUsed on a path without removals = %v, %v", used, err)
	}
}

func certPEM(t *testing.T, srv *httptest.Server) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}
