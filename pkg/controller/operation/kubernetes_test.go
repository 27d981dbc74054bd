package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

const kubeFrom, kubeTarget = "v1.36.0", "v1.36.1"

// playCluster stands in for the machine config controller, the nodes and
// Kubernetes: each machine's node config carries the images of the
// versions its status.kubernetes sets (else the cluster's), and
// Kubernetes shows them: static pods Ready at those images, Nodes at the
// kubelet version.
func (f *fixture) playCluster() {
	ctx := context.Background()
	var cluster v1alpha1.TalosCluster
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &cluster); err != nil {
		f.t.Fatal(err)
	}
	for _, name := range machineNames {
		var m v1alpha1.TalosMachine
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
			f.t.Fatal(err)
		}
		v := func(c v1alpha1.KubernetesComponent) string { return render.KubernetesVersion(&cluster, &m, c) }
		typ := "worker"
		if strings.HasPrefix(name, "cp") {
			typ = "controlplane"
		}
		f.node(name).Config = fmt.Appendf(nil, `version: v1alpha1
machine:
  type: %s
  kubelet: {image: ghcr.io/siderolabs/kubelet:%s}
  install: {image: siderolabs/installer:v1.13.0}
cluster:
  apiServer: {image: registry.k8s.io/kube-apiserver:%s}
  controllerManager: {image: registry.k8s.io/kube-controller-manager:%s}
  scheduler: {image: registry.k8s.io/kube-scheduler:%s}
  proxy: {image: registry.k8s.io/kube-proxy:%s}
`, typ, v(v1alpha1.ComponentKubelet), v(v1alpha1.ComponentAPIServer), v(v1alpha1.ComponentControllerManager), v(v1alpha1.ComponentScheduler), v(v1alpha1.ComponentProxy))

		node, err := f.kube.CoreV1().Nodes().Get(ctx, "node-"+name, metav1.GetOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		if node.Status.NodeInfo.KubeletVersion != v(v1alpha1.ComponentKubelet) {
			node.Status.NodeInfo.KubeletVersion = v(v1alpha1.ComponentKubelet)
			if _, err := f.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
				f.t.Fatal(err)
			}
		}
		if typ == "worker" {
			continue
		}
		for _, c := range []v1alpha1.KubernetesComponent{v1alpha1.ComponentAPIServer, v1alpha1.ComponentControllerManager, v1alpha1.ComponentScheduler} {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: string(c) + "-node-" + name, Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": string(c)}},
				Spec:       corev1.PodSpec{NodeName: "node-" + name, Containers: []corev1.Container{{Name: string(c), Image: "registry.k8s.io/" + string(c) + ":" + v(c)}}},
				Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			}
			if old, err := f.kube.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
				if old.Spec.Containers[0].Image == pod.Spec.Containers[0].Image {
					continue
				}
				if err := f.kube.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
					f.t.Fatal(err)
				}
			}
			if _, err := f.kube.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	f.playKubeProxy(cluster.Spec.KubernetesVersion, !f.kubeProxyStuck)
}

// playKubeProxy stands in for Talos's bootstrap and the DaemonSet
// controller: kube-proxy's DaemonSet exists (created at version, with the
// fields Talos sets, when missing), and once rolledOut every node runs
// its current template.
func (f *fixture) playKubeProxy(version string, rolledOut bool) {
	ctx := context.Background()
	dss := f.kube.AppsV1().DaemonSets(metav1.NamespaceSystem)
	ds, err := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ds, err = dss.Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: metav1.NamespaceSystem, Generation: 1,
				Annotations: map[string]string{"config.k8s.io/owning-inventory": "talos-bootstrap-manifests-inventory"}},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:" + version}},
			}}},
		}, metav1.CreateOptions{FieldManager: "talos"})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	want := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 4, CurrentNumberScheduled: 4, NumberReady: 4}
	if rolledOut {
		want.UpdatedNumberScheduled, want.NumberAvailable = 4, 4
	}
	if !equality.Semantic.DeepEqual(ds.Status, want) {
		ds.Status = want
		if _, err := dss.UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// kubeProxyImage is the image kube-proxy's DaemonSet runs.
func (f *fixture) kubeProxyImage() string {
	ds, err := f.kube.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}

func kubernetesUpgrade(version string) *v1alpha1.TalosOperation {
	return started("kubernetes", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationKubernetesUpgrade,
		KubernetesUpgrade: &v1alpha1.KubernetesUpgradeParameters{Version: version}})
}

// TestKubernetesUpgradeSurvivesACrashAtEveryWrite: whichever status write
// is lost, the upgrade runs every component on every machine in
// talosctl upgrade-k8s's order, the cluster's version follows, and the
// machines' own versions go.
func TestKubernetesUpgradeSurvivesACrashAtEveryWrite(t *testing.T) {
	var want []string
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
			want = append(want, cp+" "+c)
		}
	}
	want = append(want, "cp-1 kubelet", "cp-2 kubelet", "cp-3 kubelet", "worker-1 kubelet")
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, kubernetesUpgrade(kubeTarget))
			f.react = f.playCluster
			f.playCluster()
			f.failWrite = fail
			op := f.run("kubernetes")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			var got []string
			for _, s := range op.Status.Steps {
				got = append(got, s.Machine+" "+string(s.Component))
				if s.Phase != v1alpha1.OperationSucceeded {
					t.Errorf("step %s %s: %s %s", s.Machine, s.Component, s.Phase, s.Message)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("steps %v\nwant %v", got, want)
			}
			var cluster v1alpha1.TalosCluster
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &cluster); err != nil {
				t.Fatal(err)
			}
			if cluster.Spec.KubernetesVersion != kubeTarget {
				t.Errorf("spec.kubernetesVersion = %s", cluster.Spec.KubernetesVersion)
			}
			if got := f.kubeProxyImage(); got != "registry.k8s.io/kube-proxy:"+kubeTarget {
				t.Errorf("kube-proxy's DaemonSet runs %s", got)
			}
			for _, name := range machineNames {
				var m v1alpha1.TalosMachine
				if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
					t.Fatal(err)
				}
				if m.Status.Kubernetes != nil {
					t.Errorf("%s keeps versions %+v", name, m.Status.Kubernetes)
				}
				if n := f.node(name); n.Boots != 0 {
					t.Errorf("%s rebooted", name)
				}
			}
		})
	}
}

// TestKubernetesUpgradeSetsALostVersion: the controller stops after
// recording a step Running and before setting its machine's version; the
// step, followed, sets it, and the upgrade goes on to the end.
func TestKubernetesUpgradeSetsALostVersion(t *testing.T) {
	f := newFixture(t, kubernetesUpgrade(kubeTarget))
	f.react = f.playCluster
	f.playCluster()
	f.failMachinePatches = 1
	op := f.run("kubernetes")
	if op.Status.Phase != v1alpha1.OperationSucceeded || f.failMachinePatches != 0 {
		t.Fatalf("ended %s (patches left to fail: %d): %+v", op.Status.Phase, f.failMachinePatches, op.Status.Conditions)
	}
}

// TestKubernetesUpgradeWaitsForTheNode: a step is not done while the node's
// config lacks the new version; past the step timeout it fails, saying
// what it waited for, and no later step starts.
func TestKubernetesUpgradeWaitsForTheNode(t *testing.T) {
	f := newFixture(t, kubernetesUpgrade(kubeTarget))
	f.playCluster() // once: the machines' configs never follow
	clock := now
	f.r.Now = func() time.Time { return clock }
	f.react = func() { clock = clock.Add(time.Minute) }
	op := f.run("kubernetes")
	first := op.Status.Steps[0]
	if op.Status.Phase != v1alpha1.OperationFailed || first.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(first.Message, "waiting for the machine's config with kube-apiserver v1.36.1 to be applied") {
		t.Fatalf("phase %s, first step %+v", op.Status.Phase, first)
	}
	for _, s := range op.Status.Steps[1:] {
		if s.Phase != v1alpha1.OperationPending {
			t.Errorf("step %s %s ran after the first failed: %s", s.Machine, s.Component, s.Phase)
		}
	}
}

// TestKubernetesUpgradeWaitsForKubeProxy: the last kube-proxy step applies
// the DaemonSet from its control plane's bootstrap manifest, as Talos's
// field manager with Talos's inventory, and is not done while the
// DaemonSet has not rolled out; past the step timeout it fails saying so,
// and no kubelet moves.
func TestKubernetesUpgradeWaitsForKubeProxy(t *testing.T) {
	f := newFixture(t, kubernetesUpgrade(kubeTarget))
	f.kubeProxyStuck = true
	clock := now
	f.r.Now = func() time.Time { return clock }
	f.react = func() { f.playCluster(); clock = clock.Add(time.Minute) }
	f.playCluster()
	op := f.run("kubernetes")
	var proxy v1alpha1.OperationStep
	for _, s := range op.Status.Steps {
		switch {
		case s.Component == v1alpha1.ComponentKubelet && s.Phase != v1alpha1.OperationPending:
			t.Errorf("step %s %s ran while kube-proxy rolled out: %s", s.Machine, s.Component, s.Phase)
		case s.Machine == "cp-3" && s.Component == v1alpha1.ComponentProxy:
			proxy = s
		}
	}
	if op.Status.Phase != v1alpha1.OperationFailed || proxy.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(proxy.Message, "waiting for the DaemonSet kube-system/kube-proxy to roll out: 0 of 4 pods updated, 0 available") {
		t.Fatalf("phase %s, cp-3 kube-proxy step %+v", op.Status.Phase, proxy)
	}
	ds, err := f.kube.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "registry.k8s.io/kube-proxy:"+kubeTarget {
		t.Errorf("kube-proxy's DaemonSet runs %s", got)
	}
	if ds.Annotations["config.k8s.io/owning-inventory"] != "talos-bootstrap-manifests-inventory" {
		t.Errorf("annotations %v lost Talos's inventory", ds.Annotations)
	}
	applied := false
	for _, mf := range ds.ManagedFields {
		applied = applied || (mf.Manager == "talos" && mf.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !applied {
		t.Errorf("managed fields %+v: not applied as talos", ds.ManagedFields)
	}
}

// TestKubernetesUpgradePrechecks: a path Kubernetes refuses, and a version
// a machine's Talos does not run, fail the operation before any step,
// touching no machine.
func TestKubernetesUpgradePrechecks(t *testing.T) {
	for _, tc := range []struct {
		name, version, want string
		mutate              func(f *fixture)
	}{
		{"skips a minor", "v1.38.0", "one minor version at a time", nil},
		{"downgrade", "v1.35.9", "does not downgrade", nil},
		{"back from what a stopped upgrade left", "v1.36.1", "TalosMachine cp-1 runs kube-apiserver v1.37.0, set by a kubernetes-upgrade that did not finish", func(f *fixture) {
			var m v1alpha1.TalosMachine
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "cp-1"}, &m); err != nil {
				t.Fatal(err)
			}
			m.Status.Kubernetes = &v1alpha1.KubernetesVersions{APIServer: "v1.37.0"}
			if err := f.client.Status().Update(context.Background(), &m); err != nil {
				t.Fatal(err)
			}
		}},
		{"Talos too old", "v1.36.1", "TalosMachine cp-2 runs Talos v1.11.0", func(f *fixture) {
			var m v1alpha1.TalosMachine
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "cp-2"}, &m); err != nil {
				t.Fatal(err)
			}
			m.Status.TalosVersion = "v1.11.0"
			if err := f.client.Status().Update(context.Background(), &m); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, kubernetesUpgrade(tc.version))
			if tc.mutate != nil {
				tc.mutate(f)
			}
			op := f.run("kubernetes")
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
			if op.Status.Phase != v1alpha1.OperationFailed || len(op.Status.Steps) != 0 || c == nil ||
				c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("phase %s, steps %v, condition %+v; want PrecheckFailed saying %q", op.Status.Phase, op.Status.Steps, c, tc.want)
			}
			var machines v1alpha1.TalosMachineList
			if err := f.client.List(context.Background(), &machines, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, m := range machines.Items {
				if m.Status.Kubernetes != nil && m.Name != "cp-1" {
					t.Errorf("%s got versions %+v", m.Name, m.Status.Kubernetes)
				}
			}
		})
	}
}
