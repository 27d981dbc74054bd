package talossim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

// TestTalosctlShutdownDrains shuts a worker down with the official talosctl: Talos cordons its Node
// (with its annotation), evicts its pods, powers off, and uncordons the Node once powered on again. A
// forced shutdown skips the cordon.
func TestTalosctlShutdownDrains(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	cp := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.50:0", Hostname: "cp-shutdown", Kubernetes: k}, cl.cp, PhaseRunning)
	w := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.51:0", Hostname: "worker-shutdown", Kubernetes: k, OSCA: cl.bundle.Certs.OS}, cl.worker, PhaseRunning)
	// The simulator serves each node's API at its own endpoint (no apid proxying between nodes).
	talos := func(n *Node, args ...string) talosctlResult {
		return runTalosctl(t, bin, "", append([]string{"--talosconfig", writeTalosconfig(t, n, cl, role.Admin), "--nodes", n.Addr()}, args...)...)
	}

	talos(cp, "bootstrap").mustSucceed(t)

	kube := waitKube(t, ctx, k, loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String())
	waitNode(t, ctx, kube, "worker-shutdown")

	// The simulated controller manager runs no ServiceAccount controller.
	if _, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	pods := kube.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec:       corev1.PodSpec{NodeName: "worker-shutdown", Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pollUntil(t, ctx, "the pod to run", func() (bool, error) {
		pod, err := pods.Get(ctx, "app", metav1.GetOptions{})

		return err == nil && pod.Status.Phase == corev1.PodRunning, nil
	})

	talos(w, "shutdown", "--wait=false").mustSucceed(t)

	pollUntil(t, ctx, "the worker to power off", func() (bool, error) { return w.Phase() == PhaseShutdown, nil })

	if _, err := pods.Get(ctx, "app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod outlived the drain: %v", err)
	}

	node := waitNode(t, ctx, kube, "worker-shutdown")
	if !node.Spec.Unschedulable || node.Annotations[annotationCordoned] != annotationCordonedValue {
		t.Errorf("powered-off Node: unschedulable %t, annotations %v; want cordoned by Talos", node.Spec.Unschedulable, node.Annotations)
	}

	if err := w.PowerOn(); err != nil {
		t.Fatal(err)
	}

	pollUntil(t, ctx, "the Node to be uncordoned after the boot", func() (bool, error) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "worker-shutdown", metav1.GetOptions{})
		if err != nil {
			return false, err
		}

		_, annotated := node.Annotations[annotationCordoned]

		return w.Phase() == PhaseRunning && !node.Spec.Unschedulable && !annotated, nil
	})

	// A forced shutdown does not cordon.
	talos(w, "shutdown", "--force", "--wait=false").mustSucceed(t)
	pollUntil(t, ctx, "the worker to power off at once", func() (bool, error) { return w.Phase() == PhaseShutdown, nil })

	if node := waitNode(t, ctx, kube, "worker-shutdown"); node.Spec.Unschedulable || node.Annotations[annotationCordoned] != "" {
		t.Errorf("a forced shutdown cordoned the Node: unschedulable %t, annotations %v", node.Spec.Unschedulable, node.Annotations)
	}
}

// TestControlPlaneFollowsItsNodesPower powers a cluster's only control plane off with talosctl: its
// Kubernetes API goes down, and comes back with its data once the node is powered on.
func TestControlPlaneFollowsItsNodesPower(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	cp := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.52:0", Hostname: "cp-power", Kubernetes: k}, cl.cp, PhaseRunning)
	talos := func(args ...string) talosctlResult {
		return runTalosctl(t, bin, "", append([]string{"--talosconfig", writeTalosconfig(t, cp, cl, role.Admin), "--nodes", cp.Addr()}, args...)...)
	}

	talos("bootstrap").mustSucceed(t)

	endpoint := loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String()
	kube := waitKube(t, ctx, k, endpoint)

	if _, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "before"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	talos("shutdown", "--force", "--wait=false").mustSucceed(t)
	pollUntil(t, ctx, "the Kubernetes API to go down with its control plane", func() (bool, error) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})

		return err != nil && cp.Phase() == PhaseShutdown, nil
	})

	if !k.Bootstrapped(endpoint) {
		t.Error("a powered-off cluster no longer counts as bootstrapped")
	}

	if err := cp.PowerOn(); err != nil {
		t.Fatal(err)
	}

	kube = waitKube(t, ctx, k, endpoint)

	cm, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "before" {
		t.Fatalf("the ConfigMap after the power cycle: %v %v", err, cm)
	}
}

// TestTalosctlResetWipeModes resets a worker with the official talosctl in Talos's wipe modes: a graceful
// user-disks reset drains the node, wipes the disk named, and the node boots into its config again
// (uncordoned); system-disk refuses user disks, and without them sends the node back to maintenance mode.
func TestTalosctlResetWipeModes(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	cp := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.53:0", Hostname: "cp-wipe", Kubernetes: k}, cl.cp, PhaseRunning)
	w := appliedNode(t, ctx, Options{
		ListenAddress: "127.0.2.54:0", Hostname: "worker-wipe", Kubernetes: k, OSCA: cl.bundle.Certs.OS,
		Disks: []Disk{{Path: "/dev/sda", Size: 10 << 30}, {Path: "/dev/sdb", Size: 20 << 30}},
	}, cl.worker, PhaseRunning)
	talos := func(n *Node, args ...string) talosctlResult {
		return runTalosctl(t, bin, "", append([]string{"--talosconfig", writeTalosconfig(t, n, cl, role.Admin), "--nodes", n.Addr()}, args...)...)
	}

	talos(cp, "bootstrap").mustSucceed(t)

	kube := waitKube(t, ctx, k, loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String())
	waitNode(t, ctx, kube, "worker-wipe")

	if _, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	pods := kube.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec:       corev1.PodSpec{NodeName: "worker-wipe", Containers: []corev1.Container{{Name: "data", Image: "data:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	talos(w, "reset", "--graceful", "--reboot", "--wipe-mode", "system-disk", "--user-disks-to-wipe", "/dev/sdb", "--wait=false").
		mustFail(t, "wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")

	booted := timesEntered(w, PhaseRebooting)
	talos(w, "reset", "--graceful", "--reboot", "--wipe-mode", "user-disks", "--user-disks-to-wipe", "/dev/sdb", "--wait=false").mustSucceed(t)
	pollUntil(t, ctx, "the worker to reboot into its config", func() (bool, error) {
		return timesEntered(w, PhaseRebooting) > booted && w.Phase() == PhaseRunning, nil
	})

	if _, err := pods.Get(ctx, "data", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod outlived the graceful reset's drain: %v", err)
	}

	if wipes := w.DiskWipes(); wipes["/dev/sdb"] != 1 || wipes["/dev/sda"] != 0 {
		t.Errorf("disk wipes %v, want /dev/sdb once", wipes)
	}

	pollUntil(t, ctx, "the Node to be uncordoned after the boot", func() (bool, error) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "worker-wipe", metav1.GetOptions{})

		return err == nil && !node.Spec.Unschedulable && node.Annotations[annotationCordoned] == "", nil
	})

	maintenance := w.MaintenanceFingerprint()
	talos(w, "reset", "--graceful=false", "--reboot", "--wipe-mode", "system-disk", "--wait=false").mustSucceed(t)
	pollUntil(t, ctx, "the worker to come back in maintenance mode", func() (bool, error) { return w.Phase() == PhaseMaintenance, nil })

	if w.MaintenanceFingerprint() == maintenance {
		t.Error("the node kept its maintenance certificate across a wipe of its system disk")
	}

	if wipes := w.DiskWipes(); wipes["/dev/sdb"] != 1 {
		t.Errorf("a system-disk reset wiped a user disk: %v", wipes)
	}
}

// timesEntered counts how often n entered phase.
func timesEntered(n *Node, phase Phase) int {
	count := 0

	for _, c := range n.PhaseChanges() {
		if c.Phase == phase {
			count++
		}
	}

	return count
}
