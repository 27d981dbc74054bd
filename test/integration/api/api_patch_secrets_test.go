package api

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/test/integration/itest"
)

// TestConfigPatchSecretsRefused applies, with kubectl as a user would, a TalosConfigPatch that replaces
// the cluster's Kubernetes CA: admission refuses it, naming the field, and nothing is stored.
func TestConfigPatchSecretsRefused(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	manifest := `apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata:
  name: swap-ca
  namespace: ` + ns + `
spec:
  clusterName: prod
  patch: |
    cluster:
      ca:
        crt: Zm9v
        key: YmFy
`
	out, err := itest.CP.KubectlWithInput(ctx, []byte(manifest), "apply", "--server-side", "-f", "-", "--as=bob", "--as-group=ichor:operator")
	if err == nil {
		t.Fatalf("a patch replacing cluster.ca was accepted: %s", out)
	}
	if msg := err.Error(); !strings.Contains(msg, "spec.patch") || !strings.Contains(msg, "touches the cluster's secrets bundle (cluster.ca)") {
		t.Fatalf("refusal does not name the field: %v", err)
	}
	list, err := itest.APIClient(t).IchorV1alpha1().TalosConfigPatches(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("refused patch stored: %d items, %v", len(list.Items), err)
	}

	// The same patch without the CA goes through.
	ok := strings.Replace(manifest, "    cluster:\n      ca:\n        crt: Zm9v\n        key: YmFy\n", "    machine:\n      sysctls:\n        net.core.somaxconn: \"1024\"\n", 1)
	if out, err := itest.CP.KubectlWithInput(ctx, []byte(ok), "apply", "--server-side", "-f", "-", "--as=bob", "--as-group=ichor:operator"); err != nil {
		t.Fatalf("harmless patch refused: %v\n%s", err, out)
	}
}
