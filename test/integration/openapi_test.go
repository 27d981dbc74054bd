package integration

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kube-openapi/pkg/util"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestOpenAPIPublished checks that the aggregator publishes Ichor's schemas
// in both OpenAPI versions, the way kubectl and client generators read them.
func TestOpenAPIPublished(t *testing.T) {
	ctx := apiContext(t)
	rest := kubernetes.NewForConfigOrDie(cp.AdminConfig).Discovery().RESTClient()

	// The aggregator merges downstream OpenAPI v2 documents in the background, so poll.
	kinds := []string{"TalosCluster", "TalosMachine", "TalosConfigPatch", "TalosOperation",
		"TalosCredentialRequest", "MachineReclaim", "IchorUser", "IchorInstallation"}
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v2, err := rest.Get().AbsPath("/openapi/v2").DoRaw(ctx)
		if err != nil {
			return false, err
		}
		var swagger struct {
			Definitions map[string]json.RawMessage `json:"definitions"`
		}
		if err := json.Unmarshal(v2, &swagger); err != nil {
			return false, err
		}
		missing = missing[:0]
		for _, kind := range kinds {
			if _, ok := swagger.Definitions[modelName(kind)]; !ok {
				missing = append(missing, kind)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("OpenAPI v2 lacks %v: %v", missing, err)
	}

	v3 := waitOpenAPIv3(ctx, t)
	var doc struct {
		Paths      map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(v3, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Components.Schemas[modelName("TalosMachine")]; !ok {
		t.Error("OpenAPI v3 lacks the TalosMachine schema")
	}
	for _, path := range []string{
		"/apis/ichor.dev/v1alpha1/namespaces/{namespace}/talosmachines/{name}/status",
		"/apis/ichor.dev/v1alpha1/ichorinstallations/{name}",
	} {
		if _, ok := doc.Paths[path]; !ok {
			t.Errorf("OpenAPI v3 lacks path %s", path)
		}
	}
}

// modelName is the OpenAPI name of an ichor.dev kind: its Go name made
// REST-friendly, which the server, the apply-configuration generator and the
// fake clientset all use.
func modelName(kind string) string {
	return util.ToRESTFriendlyName(reflect.TypeOf(v1alpha1.TalosMachine{}).PkgPath()) + "." + kind
}

// waitOpenAPIv3 returns ichor.dev/v1alpha1's OpenAPI v3 document once the
// aggregator publishes it, which it does some time after the APIService is
// available.
func waitOpenAPIv3(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	rest := kubernetes.NewForConfigOrDie(cp.AdminConfig).Discovery().RESTClient()
	var doc []byte
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		doc, lastErr = rest.Get().AbsPath("/openapi/v3/apis/ichor.dev/v1alpha1").DoRaw(ctx)
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("GET /openapi/v3/apis/ichor.dev/v1alpha1: %v (%v)", lastErr, err)
	}
	return doc
}
