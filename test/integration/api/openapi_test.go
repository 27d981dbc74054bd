package api

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/test/integration/itest"
)

// TestOpenAPIPublished checks that the aggregator publishes Ichor's schemas
// in both OpenAPI versions, the way kubectl and client generators read them.
func TestOpenAPIPublished(t *testing.T) {
	ctx := itest.APIContext(t)
	rest := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig).Discovery().RESTClient()

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
			if _, ok := swagger.Definitions[itest.ModelName(kind)]; !ok {
				missing = append(missing, kind)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("OpenAPI v2 lacks %v: %v", missing, err)
	}

	v3 := itest.WaitOpenAPIv3(ctx, t)
	var doc struct {
		Paths      map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(v3, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Components.Schemas[itest.ModelName("TalosMachine")]; !ok {
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
