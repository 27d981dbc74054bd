package chart

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/mgmtnode"
	"ichor.dev/ichor/test/talossim"
)

// TestChartRunsAClusterFromImages follows docs/install.md as a platform
// team would, on a management cluster with a node: the images `make
// images` builds, `helm install --wait` with the chart, and every
// component running from its image, as the rendered pod spec says (its
// arguments, non-root user, read-only root, volumes, probes), on a node
// that runs pods in runc (test/mgmtnode). Then a one-machine cluster is
// built through that install, as the getting-started guide does: a
// simulated Talos machine placed by hand, pinned, approved, Ready. Last,
// `helm uninstall --wait` stops every pod and keeps the user roles, which
// then grant nothing. In the namespace TestChartInstallAndUpgrade used
// before it, so the install also adopts what that uninstall kept.
func TestChartRunsAClusterFromImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	runc := os.Getenv("ICHOR_RUNC")
	if runc == "" {
		t.Fatal("ICHOR_RUNC is not set: run the tests through make (hack/install-runc.sh installs runc)")
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}

	// make images, for this machine's platform alone.
	const tag = "v0.0.0-chart-test"
	images := t.TempDir()
	build := exec.CommandContext(ctx, "go", "run", "./hack/images", "-out", images, "-platforms", "linux/amd64", "-version", tag)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/images: %v\n%s", err, out)
	} else {
		t.Logf("images:\n%s", out)
	}

	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	apiServer, err := url.Parse(itest.CP.URL)
	if err != nil {
		t.Fatal(err)
	}
	node, err := mgmtnode.Start(ctx, mgmtnode.Options{Client: kube, Name: "mgmt-1", Dir: t.TempDir(), Runc: runc,
		Images: filepath.Join(images, "oci"), APIServer: apiServer.Host, ServiceCIDR: itest.CP.ServiceCIDR, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's pods:\n%s", node.Describe())
		}
	})

	const ns = "ichor-system"
	applyNamespace(t, ns, true)
	applyNamespace(t, "team-b", false)
	install := []string{"install", "ichor", chartDir(t), "-n", ns,
		"--set", "image.registry=images.ichor.invalid", "--set", "image.tag=" + tag,
		"--set", "tls.mode=generate", "--set", "monitoring.serviceMonitor=false", "--set", "monitoring.prometheusRule=false",
		"--set-json", `controller.clusterNamespaces=["team-b"]`,
		"--set", "auth.issuerURL=https://ichor-auth." + ns + ".svc",
		"--set-json", `installation.provisioningNetworks=["127.0.14.0/24"]`,
		"--wait", "--timeout=6m"}
	began := time.Now()
	if out, err := runHelmWithin(t, 7*time.Minute, nil, install...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("helm install --wait: every Deployment available after %s", time.Since(began).Round(time.Second))
	for _, name := range []string{"ichor-apiserver", "ichor-controller", "ichor-auth", "ichor-ui"} {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			t.Errorf("deployment %s: %d of %d replicas ready", name, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
	}
	itest.MustKubectl(ctx, t, "wait", "--for=condition=Available", "--timeout=2m", "apiservice/v1alpha1.ichor.dev")

	// A cluster of one machine, through the install.
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	workload := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(workload.Stop)
	const endpointIP = "127.0.14.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := net.JoinHostPort(endpointIP, fmt.Sprint(ports[0]))
	machine := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.14.1:0", Kubernetes: workload, Etcd: &talossim.EtcdCluster{Name: "first"},
		Trustd: talossim.NewTrustd(), InstallDelay: 100 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	// The machines' network, as the management cluster's pods reach it.
	if err := node.Expose(endpoint, machine.Addr()); err != nil {
		t.Fatal(err)
	}
	itest.MustApply(ctx, t, fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: first, namespace: team-b}
spec:
  talosVersion: %s
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://%s"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: first-1, namespace: team-b}
spec: {clusterName: first, role: controlplane, address: "%s", hostname: first-1, install: {disk: /dev/sda}}
`, talossim.DefaultVersion, endpoint, machine.Addr()))
	itest.WaitMachine(ctx, t, "team-b", "first-1", "pinned", itest.PinnedTo(machine.MaintenanceFingerprint()))
	itest.MustKubectl(ctx, t, "-n", "team-b", "patch", "talosmachine", "first-1", "--subresource=approval", "--type=merge",
		"-p", `{"status":{"approval":{"decision":"Approved"}}}`)
	itest.WaitCluster(ctx, t, "team-b", "first", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	t.Logf("cluster first Ready %s after the install began", time.Since(began).Round(time.Second))

	out := itest.MustKubectl(ctx, t, "-n", ns, "get", "pods", "-o", "custom-columns=NAME:.metadata.name,READY:.status.containerStatuses[0].ready,RESTARTS:.status.containerStatuses[0].restartCount", "--no-headers")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) != 3 || f[1] != "true" || f[2] != "0" {
			t.Errorf("a pod not ready, or restarted: %q", line)
		}
	}

	// Uninstall stops every pod (the node deletes each once its containers
	// ended) and leaves the user roles, which then grant nothing.
	if out, err := runHelmWithin(t, 3*time.Minute, nil, "uninstall", "ichor", "-n", ns, "--wait", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = nil
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("pods the uninstall left: %v (%v)", left, err)
	}
	for _, name := range []string{"ichor-viewer", "ichor-operator", "ichor-admin"} {
		role, err := kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("the uninstall did not keep %s: %v", name, err)
			continue
		}
		if role.Annotations["meta.helm.sh/release-name"] != "ichor" || len(role.Rules) != 0 {
			t.Errorf("%s after the uninstall: release %q, %d rules", name, role.Annotations["meta.helm.sh/release-name"], len(role.Rules))
		}
	}
}
