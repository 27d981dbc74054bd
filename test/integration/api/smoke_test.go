package api

import (
	"context"
	"strings"
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

func TestKubectlGetThroughAggregator(t *testing.T) {
	ns := itest.CP.Namespace(t)
	out, err := itest.CP.Kubectl(context.Background(), "get", "talosmachines", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	_ = out
	out, err = itest.CP.Kubectl(context.Background(), "api-resources", "--api-group=ichor.dev")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "talosmachines") {
		t.Fatalf("api-resources lacks talosmachines:\n%s", out)
	}
	t.Log(out)
}
