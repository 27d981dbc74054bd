package talossim

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestStaticPodsFollowConfig: a control plane's mirror pods carry its component configs' images and
// config versions (the COSI resource versions talosctl upgrade-k8s compares), Running and Ready; a
// no-reboot apply of a new kube-apiserver image replaces that pod alone at the next config version,
// and a new kubelet image restarts the kubelet, whose Node then reports the new version.
func TestStaticPodsFollowConfig(t *testing.T) {
	t.Parallel()

	ctx, cl, _, admin, kube := bootstrappedControlPlane(t, "127.0.2.41")

	configVersion := func(typ string) string {
		var version string

		switch typ {
		case k8s.APIServerConfigID:
			r, err := safe.StateGetByID[*k8s.APIServerConfig](ctx, admin.COSI, k8s.APIServerConfigID)
			if err != nil {
				t.Fatal(err)
			}

			version = r.Metadata().Version().String()
		case k8s.SchedulerConfigID:
			r, err := safe.StateGetByID[*k8s.SchedulerConfig](ctx, admin.COSI, k8s.SchedulerConfigID)
			if err != nil {
				t.Fatal(err)
			}

			version = r.Metadata().Version().String()
		}

		return version
	}

	waitPod := func(component, image, version string) *corev1.Pod {
		t.Helper()

		var pod *corev1.Pod

		pollUntil(t, ctx, component+" mirror pod at "+image, func() (bool, error) {
			p, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, component+"-cp-1", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}

			if err != nil {
				return false, err
			}

			pod = p

			return p.Spec.Containers[0].Image == image && p.Annotations[constants.AnnotationStaticPodConfigVersion] == version &&
				podReady(p) && p.Status.HostIP == "127.0.2.41", nil
		})

		return pod
	}

	oldAPIServer := loadConfig(t, cl.cp).K8sAPIServerConfig().Image()
	waitPod(k8s.APIServerConfigID, oldAPIServer, configVersion(k8s.APIServerConfigID))
	scheduler := waitPod(k8s.SchedulerConfigID, loadConfig(t, cl.cp).K8sSchedulerConfig().Image(), configVersion(k8s.SchedulerConfigID))

	if scheduler.Labels["k8s-app"] != "kube-scheduler" || scheduler.Annotations[corev1.MirrorPodAnnotationKey] == "" {
		t.Errorf("scheduler mirror pod labels %v annotations %v", scheduler.Labels, scheduler.Annotations)
	}

	before := configVersion(k8s.APIServerConfigID)
	upgraded := patch(t, cl.cp, `cluster:
  apiServer:
    image: registry.k8s.io/kube-apiserver:v1.36.1
machine:
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.36.1
`)

	if _, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: upgraded, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatalf("apply: %v", err)
	}

	after := configVersion(k8s.APIServerConfigID)
	if after == before {
		t.Fatalf("APIServerConfig version stayed %s after a new image", before)
	}

	waitPod(k8s.APIServerConfigID, "registry.k8s.io/kube-apiserver:v1.36.1", after)
	waitPod(k8s.SchedulerConfigID, scheduler.Spec.Containers[0].Image, scheduler.Annotations[constants.AnnotationStaticPodConfigVersion])

	pollUntil(t, ctx, "the Node at kubelet v1.36.1", func() (bool, error) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}

		return node.Status.NodeInfo.KubeletVersion == "v1.36.1", nil
	})
}

// bootstrappedControlPlane runs one control plane, cp-1, at ip with its Kubernetes, bootstrapped:
// the test's context, cluster, node, an os:admin client and a Kubernetes admin client.
func bootstrappedControlPlane(t *testing.T, ip string) (context.Context, *testCluster, *Node, *client.Client, kubernetes.Interface) {
	t.Helper()

	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	cp := appliedNode(t, ctx, Options{ListenAddress: ip + ":0", Hostname: "cp-1", Kubernetes: k}, cl.cp, PhaseRunning)
	admin := certClient(t, cp, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	if err := admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	cfg, err := k.WaitReady(ctx, loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String())
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}

	return ctx, cl, cp, admin, kubernetes.NewForConfigOrDie(cfg)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// TestTalosctlUpgradeK8s runs the official talosctl upgrade-k8s against a simulated control plane.
// With --dry-run it finds the control plane through the Kubernetes API (its role label), checks the
// path and the node's Talos version, reads the component configs, the kubelet's spec and service over
// COSI and the machine config, and reports each update it would make, changing nothing. Then for real:
// it patches each component's image with no-reboot applies, waits for each static pod at the new
// config version, for the kubelet service to restart and its Node to report the new version.
// (One node: the simulator's apid does not proxy to other nodes.)
func TestTalosctlUpgradeK8s(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	ctx, cl, cp, admin, kube := bootstrappedControlPlane(t, "127.0.2.43")
	pollUntil(t, ctx, "the control plane's Node, mirror pods and kube-proxy", func() (bool, error) {
		pods, err := kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}

		ready := 0

		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				ready++
			}
		}

		return len(pods.Items) == 4 && ready == 4, nil
	})

	activeConfig := func() []byte {
		mc, err := safe.StateGetByID[*configres.MachineConfig](ctx, admin.COSI, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		// Its content, without the comments the encoder that wrote it added:
		// talosctl v1.13.0 re-applies the config, encoded by its machinery.
		b, err := mc.Provider().EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			t.Fatal(err)
		}

		return b
	}

	before := activeConfig()
	talosconfig := writeTalosconfig(t, cp, cl, role.Admin)

	// The bootstrap manifests, as Talos lists them.
	r := runTalosctl(t, bin, "", "--talosconfig", talosconfig, "--nodes", "127.0.2.43", "get", "manifests").mustSucceed(t)
	for _, id := range []string{"00-kubelet-bootstrapping-token", "01-csr-node-bootstrap", "10-kube-proxy", "11-kube-config-in-cluster"} {
		wantLine(t, r, r.stdout, "127.0.2.43", "controlplane", "Manifest", id)
	}
	r = runTalosctl(t, bin, "", "--talosconfig", talosconfig, "--nodes", "127.0.2.43", "upgrade-k8s", "--to", "1.36.1", "--dry-run").mustSucceed(t)

	out := r.stdout + r.stderr
	for _, want := range []string{
		`discovered controlplane nodes ["127.0.2.43"]`,
		"update kube-apiserver: v1.36.0 -> 1.36.1",
		"update kube-controller-manager: v1.36.0 -> 1.36.1",
		"update kube-scheduler: v1.36.0 -> 1.36.1",
		"update kubelet: 1.36.0 -> 1.36.1",
		"updating manifests (dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("talosctl upgrade-k8s --dry-run did not say %q\n%v", want, r)
		}
	}

	if after := activeConfig(); !bytes.Equal(before, after) {
		t.Error("a dry run changed the node's config")
	}

	// The real thing: each static pod is replaced at its next config version and waited for, the
	// kubelet restarts and its Node reports the new version.
	r = runTalosctl(t, bin, "", "--talosconfig", talosconfig, "--nodes", "127.0.2.43", "upgrade-k8s", "--to", "1.36.1").mustSucceed(t)
	for _, want := range []string{
		`"127.0.2.43": machine configuration patched`,
		`"127.0.2.43": waiting for kube-apiserver pod update`,
		`"127.0.2.43": waiting for kubelet restart`,
		`"127.0.2.43": successfully updated`,
	} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("talosctl upgrade-k8s did not say %q\n%v", want, r)
		}
	}

	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		pod, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, c+"-cp-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		if image := pod.Spec.Containers[0].Image; !strings.HasSuffix(image, ":v1.36.1") {
			t.Errorf("%s runs %s after talosctl upgrade-k8s", pod.Name, image)
		}
	}

	// The manifests were synced: kube-proxy's DaemonSet rolled out to the new version.
	ds, err := kube.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if image := ds.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(image, ":v1.36.1") {
		t.Errorf("the kube-proxy DaemonSet runs %s after talosctl upgrade-k8s", image)
	}

	pods, err := kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		t.Fatal(err)
	}

	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && (!strings.HasSuffix(p.Spec.Containers[0].Image, ":v1.36.1") || !podReady(p)) {
			t.Errorf("kube-proxy pod %s: %s, ready %v", p.Name, p.Spec.Containers[0].Image, podReady(p))
		}
	}

	node, err := kube.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.36.1" {
		t.Errorf("Node cp-1 reports kubelet %s after talosctl upgrade-k8s", v)
	}
}
