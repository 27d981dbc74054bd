// Package chart tests the Helm chart charts/ichor with the real helm CLI
// (hack/build-helm.sh) against a management cluster with no Ichor of its
// own: lint, values that the schema and the chart refuse, every ci/ values
// file through kube-apiserver's server-side dry run, and a real install and
// upgrade.
package chart

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

func TestMain(m *testing.M) { itest.Main(m, itest.Bare) }

// chartDir is charts/ichor of this repository.
func chartDir(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "ichor")
}

// helmTimeout bounds one helm command.
const helmTimeout = 2 * time.Minute

// runHelm runs the helm CLI as the cluster's admin, with its configuration,
// cache and data in the test's own directory, and returns its stdout.
func runHelm(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	return runHelmWithin(t, helmTimeout, stdin, args...)
}

// runHelmWithin is runHelm with its own time limit, for --wait.
func runHelmWithin(t *testing.T, limit time.Duration, stdin []byte, args ...string) (string, error) {
	t.Helper()
	dir := os.Getenv("ICHOR_HELM_BIN")
	if dir == "" {
		t.Fatal("ICHOR_HELM_BIN is not set: run the tests through make (it builds helm with hack/build-helm.sh)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "helm"), args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+itest.CP.AdminKubeconfig,
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &helmError{args: args, err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type helmError struct {
	args   []string
	err    error
	stderr string
}

func (e *helmError) Error() string {
	return "helm " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.stderr
}

// ciValues are the chart's ci/ values files.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no charts/ichor/ci/*.yaml: %v", err)
	}
	return files
}

// The Prometheus operator's and cert-manager's APIs, as a cluster that runs
// them serves them, for the values files that need them.
var extraAPIVersions = []string{"cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer",
	"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// TestChartLint: helm lint --strict passes with the defaults and with every
// ci/ values file.
func TestChartLint(t *testing.T) {
	dir := chartDir(t)
	if out, err := runHelm(t, nil, "lint", "--strict", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, values := range ciValues(t) {
		if out, err := runHelm(t, nil, "lint", "--strict", dir, "-f", values); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestChartRefuses: wrong values fail the render with a message that says
// what is wrong and what to do, from the schema or from the chart.
func TestChartRefuses(t *testing.T) {
	dir := chartDir(t)
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"replicas not a number", []string{"--set", "apiserver.replicas=two"}, "at '/apiserver/replicas': got string, want integer"},
		{"unknown TLS mode", []string{"--set", "tls.mode=vault"}, "at '/tls/mode': value must be one of 'auto', 'cert-manager', 'generate', 'secrets'"},
		{"misspelt value", []string{"--set", "controller.installimage=x"}, "additional properties 'installimage' not allowed"},
		{"issuer not https", []string{"--set", "auth.issuerURL=http://auth.example"}, "at '/auth/issuerURL'"},
		{"network without prefix", []string{"--set-json", `installation.provisioningNetworks=["10.5.0.1"]`}, "at '/installation/provisioningNetworks/0'"},
		{"digest not sha256", []string{"--set", "image.digests.apiserver=latest"}, "at '/image/digests/apiserver'"},
		{"no audience", []string{"--set-json", "installation.managementAudiences=[]"}, "at '/installation/managementAudiences'"},
		{"two apiservers on the embedded etcd", []string{"--set", "apiserver.replicas=2"},
			"apiserver.replicas > 1 needs apiserver.etcd.servers: the embedded etcd is a single member"},
		{"console without ichor-auth", []string{"--set", "auth.enabled=false"}, "ui.enabled needs auth.enabled"},
		{"NetworkPolicy without pod CIDRs", []string{"--set", "networkPolicy.enabled=true"}, "networkPolicy.enabled needs networkPolicy.podCIDRs"},
		{"cert-manager absent", []string{"--set", "tls.mode=cert-manager"}, "this cluster does not serve cert-manager.io/v1; install cert-manager first, or use tls.mode generate"},
		{"OpenID sign-in without a provider", []string{"--set", "ui.oidc.enabled=true"}, "ui.oidc.enabled needs ui.oidc.issuerURL"},
		{"an IPv4 provisioning network wider than /16", []string{"--set-json", `installation.provisioningNetworks=["10.5.0.0/24","10.0.0.0/8"]`},
			"installation.provisioningNetworks: 10.0.0.0/8 is wider than the controller scans; IPv4 networks must be /16 or smaller"},
		{"an IPv6 provisioning network wider than /112", []string{"--set-json", `installation.provisioningNetworks=["fd00::/64"]`},
			"installation.provisioningNetworks: fd00::/64 is wider than the controller scans; IPv6 networks must be /112 or smaller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runHelm(t, nil, append([]string{"template", "ichor", dir, "-n", "ichor-system"}, tc.set...)...)
			if err == nil {
				t.Fatalf("rendered:\n%.2000s", out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant one saying %q", err, tc.want)
			}
		})
	}
}
