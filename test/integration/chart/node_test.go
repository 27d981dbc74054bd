package chart

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// ns is where the tests that run Ichor install it, as docs/install.md does.
const ns = "ichor-system"

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
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	node := startNode(ctx, t, treeImages(ctx, t, root))
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)

	applyNamespace(t, ns, true)
	applyNamespace(t, "team-b", false)
	began := time.Now()
	if out, err := runHelmWithin(t, 7*time.Minute, nil, append([]string{"install", "ichor", chartDir(t)}, runValues(treeTag, "team-b")...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("helm install --wait: every Deployment available after %s", time.Since(began).Round(time.Second))
	checkRunning(ctx, t, kube)

	buildCluster(ctx, t, node, "team-b", "first", "127.0.14")
	t.Logf("cluster first Ready %s after the install began", time.Since(began).Round(time.Second))
	checkRunning(ctx, t, kube)

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
	// What an uninstall keeps of the API's data goes too, for the next test.
	itest.MustKubectl(ctx, t, "-n", ns, "delete", "pvc", "ichor-etcd", "--wait=true", "--timeout=1m")
}

// runValues are the flags of a helm install or upgrade of the images
// tagged tag, clusters in namespace clusters, every Deployment waited for.
func runValues(tag, clusters string) []string {
	return []string{"-n", ns,
		"--set", "image.registry=images.ichor.invalid", "--set", "image.tag=" + tag,
		"--set", "tls.mode=generate", "--set", "monitoring.serviceMonitor=false", "--set", "monitoring.prometheusRule=false",
		"--set-json", `controller.clusterNamespaces=["` + clusters + `"]`,
		"--set", "auth.issuerURL=https://ichor-auth." + ns + ".svc",
		"--set-json", `installation.provisioningNetworks=["127.0.14.0/24"]`,
		"--set", "installation.usersEnabled=true",
		"--wait", "--timeout=6m"}
}

// treeTag is the tag of the images built from this tree.
const treeTag = "v0.0.0-chart-test"

var (
	treeOnce   sync.Once
	treeLayout string
	treeErr    error
)

// treeImages are this tree's images, built once for the package's tests.
func treeImages(ctx context.Context, t *testing.T, root string) string {
	t.Helper()
	treeOnce.Do(func() {
		treeLayout, treeErr = buildImages(ctx, t, root, treeTag, filepath.Join(itest.PackageDir, "images"))
	})
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return treeLayout
}

// buildImages runs make images' builder on the tree at root into out, for
// this machine's platform alone where that tree's builder can be told so,
// and returns the OCI layout.
func buildImages(ctx context.Context, t *testing.T, root, tag, out string) (string, error) {
	t.Helper()
	args := []string{"run", "./hack/images", "-out", out, "-version", tag}
	if src, err := os.ReadFile(filepath.Join(root, "hack", "images", "main.go")); err == nil && bytes.Contains(src, []byte(`"platforms"`)) {
		args = append(args, "-platforms", "linux/amd64")
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = root
	report, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go run ./hack/images in %s: %w\n%s", root, err, report)
	}
	t.Logf("images of %s:\n%s", root, report)
	return filepath.Join(out, "oci"), nil
}

// startNode registers a node that runs pods from the layouts' images, until
// the test ends; a failing test logs its pods' states and logs.
func startNode(ctx context.Context, t *testing.T, layouts ...string) *mgmtnode.Node {
	t.Helper()
	runc := os.Getenv("ICHOR_RUNC")
	if runc == "" {
		t.Fatal("ICHOR_RUNC is not set: run the tests through make (hack/install-runc.sh installs runc)")
	}
	apiServer, err := url.Parse(itest.CP.URL)
	if err != nil {
		t.Fatal(err)
	}
	node, err := mgmtnode.Start(ctx, mgmtnode.Options{Client: kubernetes.NewForConfigOrDie(itest.CP.AdminConfig), Name: "mgmt-1",
		Dir: t.TempDir(), Runc: runc, Images: layouts, APIServer: apiServer.Host, ServiceCIDR: itest.CP.ServiceCIDR, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's pods:\n%s", node.Describe())
		}
	})
	return node
}

// checkRunning wants each Deployment of the release all ready, and no
// container restarted more than once.
func checkRunning(ctx context.Context, t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	for _, name := range []string{"ichor-apiserver", "ichor-controller", "ichor-auth", "ichor-ui"} {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas || d.Status.UpdatedReplicas != *d.Spec.Replicas {
			t.Errorf("deployment %s: %d of %d replicas ready, %d updated", name, d.Status.ReadyReplicas, *d.Spec.Replicas, d.Status.UpdatedReplicas)
		}
	}
	for _, p := range livePods(ctx, t, kube) {
		for _, c := range p.Status.ContainerStatuses {
			// One restart is what a CPU-starved machine may cost a
			// controller (a lost leader lease ends it); a component that
			// cannot start, or crash-loops while the API is not served yet,
			// restarts again and again.
			if !c.Ready || c.RestartCount > 1 {
				t.Errorf("pod %s container %s: ready %v, %d restarts", p.Name, c.Name, c.Ready, c.RestartCount)
			} else if c.RestartCount > 0 {
				t.Logf("pod %s container %s restarted once; its last run: %+v", p.Name, c.Name, c.LastTerminationState.Terminated)
			}
		}
	}
}

// livePods are the release's pods but those being deleted.
func livePods(ctx context.Context, t *testing.T, kube kubernetes.Interface) []corev1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// buildCluster builds cluster name of one control-plane machine in
// namespace clusters, on the addresses subnet.1 (the machine) and
// subnet.100 (its endpoint), as the getting-started guide does; the node
// routes them to the pods. It returns once the cluster is Ready.
func buildCluster(ctx context.Context, t *testing.T, node *mgmtnode.Node, clusters, name, subnet string) *talossim.Node {
	t.Helper()
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	workload := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(workload.Stop)
	endpointIP := subnet + ".100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := net.JoinHostPort(endpointIP, fmt.Sprint(ports[0]))
	machine := itest.SimNode(t, talossim.Options{ListenAddress: subnet + ".1:0", Kubernetes: workload, Etcd: &talossim.EtcdCluster{Name: name},
		Trustd: talossim.NewTrustd(), InstallDelay: 100 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	// The machines' network, as the management cluster's pods reach it.
	if err := node.Expose(endpoint, machine.Addr()); err != nil {
		t.Fatal(err)
	}
	itest.MustApply(ctx, t, fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  talosVersion: %[3]s
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://%[4]s"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: %[1]s-1, namespace: %[2]s}
spec: {clusterName: %[1]s, role: controlplane, address: "%[5]s", hostname: %[1]s-1, install: {disk: /dev/sda}}
`, name, clusters, talossim.DefaultVersion, endpoint, machine.Addr()))
	itest.WaitMachine(ctx, t, clusters, name+"-1", "pinned", itest.PinnedTo(machine.MaintenanceFingerprint()))
	itest.MustKubectl(ctx, t, "-n", clusters, "patch", "talosmachine", name+"-1", "--subresource=approval", "--type=merge",
		"-p", `{"status":{"approval":{"decision":"Approved"}}}`)
	itest.WaitCluster(ctx, t, clusters, name, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	return machine
}
