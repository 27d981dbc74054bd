package itest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kube-openapi/pkg/util"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// ModelName is the OpenAPI name of an ichor.dev kind: its Go name made
// REST-friendly, which the server, the apply-configuration generator and the
// fake clientset all use.
func ModelName(kind string) string {
	return util.ToRESTFriendlyName(reflect.TypeOf(v1alpha1.TalosMachine{}).PkgPath()) + "." + kind
}

// WaitOpenAPIv3 returns ichor.dev/v1alpha1's OpenAPI v3 document once the
// aggregator publishes it, which it does some time after the APIService is
// available.
func WaitOpenAPIv3(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	rest := kubernetes.NewForConfigOrDie(CP.AdminConfig).Discovery().RESTClient()
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
