package integration

import (
	"context"
	"strings"
	"testing"
)

func TestKubectlGetThroughAggregator(t *testing.T) {
	ns := cp.Namespace(t)
	out, err := cp.Kubectl(context.Background(), "get", "talosmachines", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	_ = out
	out, err = cp.Kubectl(context.Background(), "api-resources", "--api-group=ichor.dev")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "talosmachines") {
		t.Fatalf("api-resources lacks talosmachines:\n%s", out)
	}
	t.Log(out)
}
