package itest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/workload"
	"ichor.dev/ichor/test/talossim"
)

// OperationStepTimeout is how long a node may take to come back from an
// operation's reboot in these tests: a node that never boots fails its
// step after it.
const OperationStepTimeout = 15 * time.Second

// CreateOperation creates a TalosOperation with kubectl as who.
func (d *DemoCluster) CreateOperation(t *testing.T, who []string, name, spec string) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: %s, namespace: %s}\nspec:\n%s\n",
		name, d.Ns, Indent(strings.TrimSpace(spec), "  "))
	if out, err := CP.KubectlWithInput(d.Ctx, []byte(manifest), append(who, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply TalosOperation %s: %v\n%s", name, err, out)
	}
}

// StartOperation starts an operation with its start subresource, as the README shows.
func (d *DemoCluster) StartOperation(t *testing.T, who []string, name string) {
	t.Helper()
	out, err := CP.KubectlWithInput(d.Ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(who, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/"+name+"/start", "-f", "-")...)
	if err != nil {
		t.Fatalf("start %s: %v\n%s", name, err, out)
	}
}

// WaitOperation waits until done holds for operation name.
func (d *DemoCluster) WaitOperation(t *testing.T, name, what string, done func(*v1alpha1.TalosOperation) bool) *v1alpha1.TalosOperation {
	t.Helper()
	var last *v1alpha1.TalosOperation
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		op, err := APIClient(t).IchorV1alpha1().TalosOperations(d.Ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = op
		return done(op), nil
	})
	if err != nil {
		t.Fatalf("operation %s: %s: %v; status %s", name, what, err, DescribeOperation(last))
	}
	return last
}

// StartWatching starts operation name as who, watching it from before the
// start until cond holds for a version of it: a watch sees every status
// write, so a short-lived state (a step of a fast node) cannot slip between
// two polls, nor go by before the watch opens.
func (d *DemoCluster) StartWatching(t *testing.T, who []string, name, what string, cond func(*v1alpha1.TalosOperation) bool) *v1alpha1.TalosOperation {
	t.Helper()
	ctx, cancel := context.WithTimeout(d.Ctx, ClusterWait)
	defer cancel()
	w, err := APIClient(t).IchorV1alpha1().TalosOperations(d.Ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	d.StartOperation(t, who, name)
	var last *v1alpha1.TalosOperation
	for ev := range w.ResultChan() {
		if op, ok := ev.Object.(*v1alpha1.TalosOperation); ok {
			last = op
			if cond(op) {
				return op
			}
		}
	}
	t.Fatalf("operation %s: the watch ended before %s; last %s", name, what, DescribeOperation(last))
	return nil
}

// WaitOperationEnds waits until operation name ended, and wants it in phase want.
func (d *DemoCluster) WaitOperationEnds(t *testing.T, name string, want v1alpha1.OperationPhase) *v1alpha1.TalosOperation {
	t.Helper()
	op := d.WaitOperation(t, name, "ended", func(op *v1alpha1.TalosOperation) bool {
		return op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed
	})
	if op.Status.Phase != want {
		t.Fatalf("operation %s ended %s, want %s: %s", name, op.Status.Phase, want, DescribeOperation(op))
	}
	return op
}

func DescribeOperation(op *v1alpha1.TalosOperation) string {
	if op == nil {
		return "<never read>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", op.Status.Phase)
	for _, c := range op.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, s := range op.Status.Steps {
		fmt.Fprintf(&b, "\n  step %s %s: %s", s.Machine, s.Phase, s.Message)
	}
	return b.String()
}

// StepOrder is the machines of op's steps in the order they started.
func StepOrder(op *v1alpha1.TalosOperation) []string {
	steps := slices.Clone(op.Status.Steps)
	slices.SortStableFunc(steps, func(a, b v1alpha1.OperationStep) int {
		if a.StartedAt == nil || b.StartedAt == nil {
			return 0
		}
		return a.StartedAt.Compare(b.StartedAt.Time)
	})
	var names []string
	for _, s := range steps {
		names = append(names, s.Machine)
	}
	return names
}

// Versions is the Talos version each of demo's nodes runs.
func (d *DemoCluster) Versions() map[string]string {
	out := map[string]string{}
	for name, n := range d.Nodes {
		out[name] = n.Version()
	}
	return out
}

// WorkloadClient is a client of demo's own Kubernetes API, as its admin.
func (d *DemoCluster) WorkloadClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	rc, _ := d.BootstrapAccess(t)
	return kubernetes.NewForConfigOrDie(rc)
}

// PodOn creates pod name in demo's default namespace, bound to node (the
// simulated kubelet reports it Running), for a drain to evict.
func (d *DemoCluster) PodOn(t *testing.T, wl kubernetes.Interface, name, node string) {
	t.Helper()
	// The simulated controller manager runs no ServiceAccount controller.
	if _, err := wl.CoreV1().ServiceAccounts("default").Create(d.Ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := wl.CoreV1().Pods("default").Create(d.Ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: name, Image: name + ":1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rollingReboot: an operator reboots the cluster one node at a time.
func (d *DemoCluster) RollingReboot(t *testing.T) {
	ctx := d.Ctx
	// A pod runs on worker-2 in the cluster: the reboot drains it first, through the Eviction API.
	wl := d.WorkloadClient(t)
	d.PodOn(t, wl, "web", "worker-2")
	before, since := d.Reboots(), time.Now()
	d.CreateOperation(t, Operator, "reboot-all", "clusterName: demo\ntype: reboot")
	// Created Pending: nothing runs until it is started.
	if op := d.WaitOperation(t, "reboot-all", "pending", func(op *v1alpha1.TalosOperation) bool { return true }); op.Status.Phase != v1alpha1.OperationPending {
		t.Fatalf("a created operation is %s", op.Status.Phase)
	}
	d.StartOperation(t, Operator, "reboot-all")
	if out, err := CP.Kubectl(ctx, append(Operator, "wait", "-n", d.Ns, "--for=condition=Succeeded", "talosoperation/reboot-all", "--timeout=180s")...); err != nil {
		t.Fatalf("kubectl wait --for=condition=Succeeded: %v\n%s\n%s", err, out,
			DescribeOperation(d.WaitOperation(t, "reboot-all", "read", func(*v1alpha1.TalosOperation) bool { return true })))
	}
	op := d.WaitOperationEnds(t, "reboot-all", v1alpha1.OperationSucceeded)
	if got, want := StepOrder(op), []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}; !slices.Equal(got, want) {
		t.Errorf("steps ran in the order %v, want control planes first: %v", got, want)
	}
	RebootedOnce(t, before, d.Reboots())
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	for _, s := range op.Status.Steps {
		if s.BootID == "" || s.StartedAt == nil || s.CompletedAt == nil || s.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("step %+v", s)
		}
	}
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	out := MustKubectl(ctx, t, append(Operator, "get", "talosoperations", "-n", d.Ns, "reboot-all")...)
	if !strings.Contains(out, "PROGRESS") || !strings.Contains(out, "5/5") || !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl get talosoperations:\n%s", out)
	}
	for _, name := range []string{"cp-1", "worker-2"} {
		WaitEventSaying(ctx, t, d.Ns, "reboot-all", corev1.EventTypeNormal, "StepSucceeded", name+": rebooted")
	}
	if _, err := wl.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod on worker-2 after the drain: %v", err)
	}
	nodes, err := wl.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || n.Annotations[workload.CordonAnnotation] != "" {
			t.Errorf("Node %s left cordoned: %v %v", n.Name, n.Spec.Unschedulable, n.Annotations)
		}
	}
}

// talosUpgrade: an operator upgrades Talos one node at a time; the rendered
// installer image follows the new version, without another reboot.
func (d *DemoCluster) TalosUpgrade(t *testing.T) {
	ctx := d.Ctx
	before, since := d.Reboots(), time.Now()
	d.CreateOperation(t, Operator, "upgrade-1-13-1", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.1}\nmaxUnavailable: 2")
	d.StartOperation(t, Operator, "upgrade-1-13-1")
	// Progress shows while it runs.
	d.WaitOperation(t, "upgrade-1-13-1", "a step running", func(op *v1alpha1.TalosOperation) bool {
		return op.Status.Phase == v1alpha1.OperationRunning && slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
			return s.Phase == v1alpha1.OperationRunning
		})
	})
	op := d.WaitOperationEnds(t, "upgrade-1-13-1", v1alpha1.OperationSucceeded)
	if got, want := StepOrder(op), []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}; !slices.Equal(got, want) {
		t.Errorf("steps ran in the order %v, want %v", got, want)
	}
	for name, v := range d.Versions() {
		if v != "v1.13.1" {
			t.Errorf("%s runs Talos %s after the upgrade", name, v)
		}
	}
	// Control planes one at a time; the two workers together (maxUnavailable: 2).
	controlPlanes := map[string]*talossim.Node{"cp-1": d.Nodes["cp-1"], "cp-2": d.Nodes["cp-2"], "cp-3": d.Nodes["cp-3"]}
	if most, when := MostAwayAtOnce(controlPlanes, since); most != 1 {
		t.Errorf("at most %d control planes were away at once (%s), want exactly 1", most, when)
	}
	if most, when := MostAwayAtOnce(d.Nodes, since); most > 2 {
		t.Errorf("%d nodes were away at once (%s), want at most 2", most, when)
	}
	RebootedOnce(t, before, d.Reboots())
	for name := range d.Nodes {
		WaitMachine(ctx, t, d.Ns, name, "reports Talos v1.13.1", func(m *v1alpha1.TalosMachine) bool { return m.Status.TalosVersion == "v1.13.1" })
	}
	WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	// The cluster now runs v1.13.1, so every config's installer image moves
	// there too: a no-reboot change, so a machine added later installs it.
	for name, n := range d.Nodes {
		WaitMachine(ctx, t, d.Ns, name, "runs a config with the v1.13.1 installer", func(*v1alpha1.TalosMachine) bool {
			return n.InstallImage() == "siderolabs/installer:v1.13.1"
		})
	}
	if after := d.Reboots(); !maps.Equal(after, func() map[string]int {
		m := maps.Clone(before)
		for k := range m {
			m[k]++
		}
		return m
	}()) {
		t.Errorf("the installer image change rebooted nodes: before %v, after %v", before, after)
	}
	WaitBudgetFree(ctx, t, d.Ns, "demo")
}

// kubernetesUpgradeRefusals: a path Kubernetes refuses (skipping a minor,
// going down) and a version the nodes' Talos does not run end the
// operation Failed before any step, with the reason; nothing moves.
func (d *DemoCluster) KubernetesUpgradeRefusals(t *testing.T) {
	for _, tc := range []struct{ name, version, want string }{
		{"k8s-skips-a-minor", "v1.37.0", "one minor version at a time: from 1.35 go to 1.36 first"},
		{"k8s-downgrade", "v1.34.0", "Kubernetes does not downgrade"},
	} {
		d.CreateOperation(t, Operator, tc.name, "clusterName: demo\ntype: kubernetes-upgrade\nkubernetesUpgrade: {version: "+tc.version+"}")
		d.StartOperation(t, Operator, tc.name)
		op := d.WaitOperationEnds(t, tc.name, v1alpha1.OperationFailed)
		if len(op.Status.Steps) != 0 {
			t.Errorf("%s: steps %+v recorded for a refused upgrade", tc.name, op.Status.Steps)
		}
		c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, tc.want) {
			t.Errorf("%s: Succeeded condition %+v, want PrecheckFailed saying %q", tc.name, c, tc.want)
		}
		WaitEventSaying(d.Ctx, t, d.Ns, tc.name, corev1.EventTypeWarning, "Failed", tc.want)
	}
	for name := range d.Nodes {
		m, err := d.Machines.Get(d.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Status.Kubernetes != nil {
			t.Errorf("%s: a refused upgrade set versions %+v", name, m.Status.Kubernetes)
		}
	}
}

// kubernetesUpgrade: an operator moves demo from Kubernetes 1.35 to 1.36.
// Each control-plane component goes one control plane at a time, then
// kube-proxy, then every kubelet, control planes first, each step done
// only when the node shows it (its static pod Ready at the new image, its
// Node Ready at the new kubelet version); one step at a time, no node
// reboots. The cluster's spec.kubernetesVersion follows, and its machines'
// per-component versions go.
func (d *DemoCluster) KubernetesUpgrade(t *testing.T) {
	ctx := d.Ctx
	const target = "v1.36.0"
	before, since := d.Reboots(), time.Now()
	d.CreateOperation(t, Operator, "kubernetes-1-36", "clusterName: demo\ntype: kubernetes-upgrade\nkubernetesUpgrade: {version: "+target+"}")
	d.StartOperation(t, Operator, "kubernetes-1-36")
	op := d.WaitOperationEnds(t, "kubernetes-1-36", v1alpha1.OperationSucceeded)

	var want []string
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
			want = append(want, cp+" "+c)
		}
	}
	for _, m := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"} {
		want = append(want, m+" kubelet")
	}
	var got []string
	for i, s := range op.Status.Steps {
		got = append(got, s.Machine+" "+string(s.Component))
		if s.Phase != v1alpha1.OperationSucceeded || s.StartedAt == nil || s.CompletedAt == nil {
			t.Errorf("step %s %s: %+v", s.Machine, s.Component, s)
			continue
		}
		if i > 0 {
			if prev := op.Status.Steps[i-1]; prev.CompletedAt != nil && s.StartedAt.Before(prev.CompletedAt) {
				t.Errorf("step %s %s started at %s, before %s %s ended at %s", s.Machine, s.Component, s.StartedAt, prev.Machine, prev.Component, prev.CompletedAt)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 0 {
		t.Errorf("%d nodes were away at once (%s) during a Kubernetes upgrade, want none", most, when)
	}
	if after := d.Reboots(); !maps.Equal(before, after) {
		t.Errorf("the Kubernetes upgrade rebooted nodes: before %v, after %v", before, after)
	}

	// The nodes show it: static pods at the new images, Ready; every Node
	// Ready at the new kubelet version.
	admin, err := d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	workload := kubernetes.NewForConfigOrDie(admin)
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			pod, err := workload.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, c+"-"+cp, metav1.GetOptions{})
			if err != nil {
				t.Errorf("static pod %s-%s: %v", c, cp, err)
				continue
			}
			if image := pod.Spec.Containers[0].Image; !strings.HasSuffix(image, ":"+target) {
				t.Errorf("static pod %s runs %s", pod.Name, image)
			}
		}
	}
	// kube-proxy's DaemonSet was applied from the bootstrap manifest as
	// Talos's sync applies it, and rolled out before any kubelet moved.
	ds, err := workload.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if image := ds.Spec.Template.Spec.Containers[0].Image; image != "registry.k8s.io/kube-proxy:"+target {
		t.Errorf("kube-proxy's DaemonSet runs %s", image)
	}
	proxyDone := op.Status.Steps[len(want)-6].CompletedAt // cp-3 kube-proxy, before the kubelets
	if s := op.Status.Steps[len(want)-6]; s.Machine != "cp-3" || s.Component != v1alpha1.ComponentProxy || !strings.Contains(s.Message, "kube-proxy runs Kubernetes "+target) {
		t.Errorf("the last kube-proxy step: %+v", s)
	}
	WaitEventSaying(ctx, t, d.Ns, "kubernetes-1-36", corev1.EventTypeNormal, "KubeProxyApplied", "DaemonSet kube-system/kube-proxy: kube-proxy "+target)
	pods, err := workload.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+target) && p.Status.Phase == corev1.PodRunning {
			running++
			if p.CreationTimestamp.After(proxyDone.Time) {
				t.Errorf("kube-proxy pod %s was created at %s, after its step ended at %s", p.Name, p.CreationTimestamp, proxyDone)
			}
		}
	}
	if running != len(d.Nodes) {
		t.Errorf("%d kube-proxy pods run %s, want one per node (%d)", running, target, len(d.Nodes))
	}

	nodes, err := workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != target {
			t.Errorf("Node %s reports kubelet %s", n.Name, n.Status.NodeInfo.KubeletVersion)
		}
	}

	// The cluster follows; the machines' own versions go, their configs unchanged.
	clusters := APIClient(t).IchorV1alpha1().TalosClusters(d.Ns)
	c, err := clusters.Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.KubernetesVersion != target {
		t.Errorf("spec.kubernetesVersion = %s after the upgrade, want %s", c.Spec.KubernetesVersion, target)
	}
	for name := range d.Nodes {
		WaitMachine(ctx, t, d.Ns, name, "has no Kubernetes versions of its own", func(m *v1alpha1.TalosMachine) bool { return m.Status.Kubernetes == nil })
	}
	// status.kubernetesVersion is the lowest the cluster runs, observed.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, ControllerWait, true, func(ctx context.Context) (bool, error) {
		c, err = clusters.Get(ctx, "demo", metav1.GetOptions{})
		return err == nil && c.Status.KubernetesVersion == target, err
	}); err != nil {
		t.Errorf("status.kubernetesVersion = %q, want %s: %v", c.Status.KubernetesVersion, target, err)
	}
	WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	WaitEventSaying(ctx, t, d.Ns, "kubernetes-1-36", corev1.EventTypeNormal, "KubernetesVersionFollowed", "v1.35.2 -> "+target)
	WaitBudgetFree(ctx, t, d.Ns, "demo")
}

// upgradeRefusals: a downgrade ends the operation Failed before any step
// (an operator's, without an admin's override); a release Ichor does not
// manage is refused at creation; an image that cannot be pulled ends it
// Failed at its first step, with the reason, and no node is touched.
func (d *DemoCluster) UpgradeRefusals(t *testing.T) {
	before := d.Reboots()
	d.CreateOperation(t, Operator, "downgrade", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.0}")
	d.StartOperation(t, Operator, "downgrade")
	if op := d.WaitOperationEnds(t, "downgrade", v1alpha1.OperationFailed); len(op.Status.Steps) != 0 {
		t.Errorf("downgrade: steps %+v, want none", op.Status.Steps)
	} else if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil ||
		c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, "does not downgrade Talos") {
		t.Errorf("downgrade: Succeeded condition %+v", c)
	}
	// A release Ichor does not manage is refused at creation, with the reason.
	manifest := fmt.Sprintf("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: unmanaged, namespace: %s}\n"+
		"spec: {clusterName: demo, type: talos-upgrade, talosUpgrade: {version: v1.15.0}}\n", d.Ns)
	if out, err := CP.KubectlWithInput(d.Ctx, []byte(manifest), append(Operator, "apply", "-f", "-")...); err == nil ||
		!strings.Contains(err.Error(), `spec.talosUpgrade.version: Invalid value: "v1.15.0": Ichor manages Talos v1.13.x and v1.14.x`) {
		t.Errorf("an upgrade to v1.15.0: %v\n%s", err, out)
	}
	for _, tc := range []struct{ name, version, want string }{
		{"unpullable", "v1.13.9", "pull the installer"},
	} {
		d.CreateOperation(t, Operator, tc.name, "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: "+tc.version+"}")
		d.StartOperation(t, Operator, tc.name)
		op := d.WaitOperationEnds(t, tc.name, v1alpha1.OperationFailed)
		first := op.Status.Steps[0]
		if first.Phase != v1alpha1.OperationFailed || !strings.Contains(first.Message, tc.want) {
			t.Errorf("%s: first step %+v, want Failed saying %q", tc.name, first, tc.want)
		}
		for _, s := range op.Status.Steps[1:] {
			if s.Phase != v1alpha1.OperationPending {
				t.Errorf("%s: step %+v ran after the first failed", tc.name, s)
			}
		}
		if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.OperationReasonStepFailed {
			t.Errorf("%s: Succeeded condition %+v", tc.name, c)
		}
		WaitEventSaying(d.Ctx, t, d.Ns, tc.name, corev1.EventTypeWarning, "StepFailed", tc.want)
	}
	if after := d.Reboots(); !maps.Equal(before, after) {
		t.Errorf("refused upgrades rebooted nodes: before %v, after %v", before, after)
	}
	for name, v := range d.Versions() {
		if v != "v1.13.1" {
			t.Errorf("%s runs %s after refused upgrades", name, v)
		}
	}
	// A version that is not one is refused at create, with the field.
	out, err := CP.KubectlWithInput(d.Ctx, []byte(fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: not-a-version, namespace: %s}
spec: {clusterName: demo, type: talos-upgrade, talosUpgrade: {version: latest}}
`, d.Ns)), append(Operator, "apply", "-f", "-")...)
	if err == nil || !strings.Contains(fmt.Sprint(err, out), "spec.talosUpgrade.version") {
		t.Errorf("an upgrade to %q: %v\n%s", "latest", err, out)
	}
}

// foreignMachine: an operation naming a machine of another cluster fails at once.
func (d *DemoCluster) ForeignMachine(t *testing.T) {
	before := d.Reboots()
	d.CreateOperation(t, Operator, "reboot-foreign", "clusterName: demo\ntype: reboot\nmachines: [worker-1, rejected]")
	d.StartOperation(t, Operator, "reboot-foreign")
	op := d.WaitOperationEnds(t, "reboot-foreign", v1alpha1.OperationFailed)
	c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
	if c == nil || c.Reason != v1alpha1.OperationReasonInvalidTarget || !strings.Contains(c.Message, "rejected is not an approved TalosMachine of TalosCluster demo") {
		t.Errorf("Succeeded condition %+v", c)
	}
	if len(op.Status.Steps) != 0 {
		t.Errorf("steps %+v of an operation that could not start", op.Status.Steps)
	}
	if after := d.Reboots(); !maps.Equal(before, after) {
		t.Errorf("nodes rebooted: before %v, after %v", before, after)
	}
}

// etcdDefrag: etcd is defragmented one member at a time, on the control
// planes only, while its NOSPACE alarm is raised, and the alarm is disarmed.
func (d *DemoCluster) EtcdDefrag(t *testing.T) {
	// Writes leave the members' backends over the quota with fragmentation,
	// while the data in use stays under it.
	const writes = 1000
	inUse := d.Etcd.Members()[0].DBSizeInUse + writes*512
	d.Etcd.SetQuotaBackendBytes(inUse + writes*256/2)
	t.Cleanup(func() { d.Etcd.SetQuotaBackendBytes(0) })
	d.Etcd.AdvanceRevision(writes)
	if !d.Etcd.Alarmed() {
		t.Fatal("NOSPACE was not raised")
	}
	d.CreateOperation(t, Operator, "defrag", "clusterName: demo\ntype: etcd-defrag")
	d.StartOperation(t, Operator, "defrag")
	op := d.WaitOperationEnds(t, "defrag", v1alpha1.OperationSucceeded)
	if got := StepOrder(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Errorf("defragmented %v, want the three control planes in order", got)
	}
	for _, s := range op.Status.Steps {
		if !strings.Contains(s.Message, "defragmented member") || !strings.Contains(s.Message, "in use") {
			t.Errorf("step %+v does not report the database", s)
		}
	}
	if last := op.Status.Steps[2]; !strings.Contains(last.Message, "disarmed NOSPACE") || d.Etcd.Alarmed() {
		t.Errorf("the alarm after the last step (%q): raised %v", last.Message, d.Etcd.Alarmed())
	}
	WaitBudgetFree(d.Ctx, t, d.Ns, "demo")
}

// upgradeSurvivesRestart: the controller stopped while a control plane is
// away for its upgrade resumes on that step: every node is upgraded and
// rebooted exactly once, one at a time.
func (d *DemoCluster) UpgradeSurvivesRestart(t *testing.T) {
	before, since := d.Reboots(), time.Now()
	d.CreateOperation(t, Operator, "upgrade-1-13-2", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.2}")
	inFlight := d.StartWatching(t, Operator, "upgrade-1-13-2", "cp-2's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 1 && op.Status.Steps[1].Phase == v1alpha1.OperationRunning
	}).Status.Steps[1].Machine
	d.Controller.Stop()
	t.Logf("stopped the controller while %s's upgrade step runs (node %s)", inFlight, d.Nodes[inFlight].Phase())
	d.Controller = RunController(d.Parent, d.Tune)
	op := d.WaitOperationEnds(t, "upgrade-1-13-2", v1alpha1.OperationSucceeded)
	RebootedOnce(t, before, d.Reboots())
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	for name, v := range d.Versions() {
		if v != "v1.13.2" {
			t.Errorf("%s runs %s", name, v)
		}
	}
	if got := StepOrder(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}) {
		t.Errorf("steps %v", got)
	}
	WaitBudgetFree(d.Ctx, t, d.Ns, "demo")
}

// upgradeRefusedByNode: a node whose installer fails fails only its step;
// the rollout stops there and the next node is not touched.
func (d *DemoCluster) UpgradeRefusedByNode(t *testing.T) {
	d.Registry.Add("siderolabs/installer:v1.13.3")
	if err := d.Nodes["worker-1"].SetFaults(talossim.Faults{UpgradeFails: "cannot write the system disk"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Nodes["worker-1"].SetFaults(talossim.Faults{}) })
	before := d.Reboots()
	d.CreateOperation(t, Operator, "upgrade-1-13-3", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.3}")
	d.StartOperation(t, Operator, "upgrade-1-13-3")
	op := d.WaitOperationEnds(t, "upgrade-1-13-3", v1alpha1.OperationFailed)
	phases := map[string]v1alpha1.OperationPhase{}
	for _, s := range op.Status.Steps {
		phases[s.Machine] = s.Phase
	}
	want := map[string]v1alpha1.OperationPhase{"cp-1": "Succeeded", "cp-2": "Succeeded", "cp-3": "Succeeded", "worker-1": "Failed", "worker-2": "Pending"}
	if !maps.Equal(phases, want) {
		t.Errorf("steps %v, want %v\n%s", phases, want, DescribeOperation(op))
	}
	WaitEventSaying(d.Ctx, t, d.Ns, "upgrade-1-13-3", corev1.EventTypeWarning, "StepFailed", "cannot write the system disk")
	after := d.Reboots()
	if after["worker-1"] != before["worker-1"] || after["worker-2"] != before["worker-2"] {
		t.Errorf("the workers rebooted: before %v, after %v", before, after)
	}
	if v := d.Nodes["worker-2"].Version(); v != "v1.13.2" {
		t.Errorf("worker-2, after the failed step, runs %s", v)
	}
	WaitBudgetFree(d.Ctx, t, d.Ns, "demo")
}

// deletedOperationStops: deleting a running operation stops it after the
// step in flight: the object stays until that node is back, and no other
// node is rebooted.
func (d *DemoCluster) DeletedOperationStops(t *testing.T) {
	WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
	before := d.Reboots()
	d.CreateOperation(t, Operator, "reboot-deleted", "clusterName: demo\ntype: reboot")
	d.StartWatching(t, Operator, "reboot-deleted", "cp-1's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 0 && op.Status.Steps[0].Phase == v1alpha1.OperationRunning
	})
	MustKubectl(d.Ctx, t, append(Operator, "delete", "talosoperation", "-n", d.Ns, "reboot-deleted", "--wait=true", "--timeout=120s")...)
	if _, err := APIClient(t).IchorV1alpha1().TalosOperations(d.Ns).Get(d.Ctx, "reboot-deleted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted operation is still there: %v", err)
	}
	if d.Nodes["cp-1"].Phase() != talossim.PhaseRunning {
		t.Errorf("the operation was gone before cp-1 was back: %s", d.Nodes["cp-1"].Phase())
	}
	after := d.Reboots()
	for name := range d.Nodes {
		want := before[name]
		if name == "cp-1" {
			want++
		}
		if after[name] != want {
			t.Errorf("%s rebooted %d times, want %d", name, after[name]-before[name], want-before[name])
		}
	}
	WaitEventSaying(d.Ctx, t, d.Ns, "reboot-deleted", corev1.EventTypeNormal, "Stopped", "stopped after the step in flight")
	WaitBudgetFree(d.Ctx, t, d.Ns, "demo")
}

// nodeNeverBack: a node that does not come back from its reboot fails its
// step after the step timeout; the rollout stops, and nothing else is touched.
func (d *DemoCluster) NodeNeverBack(t *testing.T) {
	WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
	if err := d.Nodes["worker-1"].SetFaults(talossim.Faults{NeverBoots: true}); err != nil {
		t.Fatal(err)
	}
	before := d.Reboots()
	d.CreateOperation(t, Operator, "reboot-workers", "clusterName: demo\ntype: reboot\nmachines: [worker-1, worker-2]")
	d.StartOperation(t, Operator, "reboot-workers")
	op := d.WaitOperationEnds(t, "reboot-workers", v1alpha1.OperationFailed)
	first, second := op.Status.Steps[0], op.Status.Steps[1]
	if first.Machine != "worker-1" || first.Phase != v1alpha1.OperationFailed || !strings.Contains(first.Message, "did not come back within") {
		t.Errorf("first step %+v", first)
	}
	if second.Phase != v1alpha1.OperationPending {
		t.Errorf("second step %+v ran", second)
	}
	if after := d.Reboots(); after["worker-2"] != before["worker-2"] {
		t.Errorf("worker-2 rebooted after worker-1 failed")
	}
	WaitBudgetFree(d.Ctx, t, d.Ns, "demo")
}

// unhealthyClusterWaits: with worker-1 still off, a started operation waits
// Pending, saying why; an operator cannot let it past the check; an admin
// can, through the cluster's override, and the operation uses it up.
func (d *DemoCluster) UnhealthyClusterWaits(t *testing.T) {
	ctx := d.Ctx
	WaitMachine(ctx, t, d.Ns, "worker-1", "not Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase != v1alpha1.MachinePhaseReady })
	d.CreateOperation(t, Operator, "reboot-worker-2", "clusterName: demo\ntype: reboot\nmachines: [worker-2]")
	d.StartOperation(t, Operator, "reboot-worker-2")
	d.WaitOperation(t, "reboot-worker-2", "waiting for a healthy cluster", func(op *v1alpha1.TalosOperation) bool {
		c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
		return op.Status.Phase == v1alpha1.OperationPending && c != nil && c.Reason == v1alpha1.OperationReasonClusterNotHealthy &&
			strings.Contains(c.Message, "worker-1")
	})
	override := []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"Override","check":"ClusterHealth","reason":"worker-1 is being replaced"}`)
	path := "/apis/ichor.dev/v1alpha1/namespaces/" + d.Ns + "/talosclusters/demo/override"
	if out, err := CP.KubectlWithInput(ctx, override, append(Operator, "create", "--raw", path, "-f", "-")...); err == nil || !strings.Contains(fmt.Sprint(err, out), "override") {
		t.Fatalf("an operator's override: %v\n%s", err, out)
	}
	if out, err := CP.KubectlWithInput(ctx, override, append(Admin, "create", "--raw", path, "-f", "-")...); err != nil {
		t.Fatalf("an admin's override: %v\n%s", err, out)
	}
	op := d.WaitOperationEnds(t, "reboot-worker-2", v1alpha1.OperationSucceeded)
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionHealthOverridden); c == nil || !strings.Contains(c.Message, "carol") {
		t.Errorf("ClusterHealthOverridden %+v, want it naming carol", c)
	}
	WaitEventSaying(ctx, t, d.Ns, "reboot-worker-2", corev1.EventTypeWarning, "OverrideUsed", "worker-1 is being replaced")
	c, err := APIClient(t).IchorV1alpha1().TalosClusters(d.Ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil || c.Status.Override != nil {
		t.Errorf("the override after it was used: %+v, %v", c.Status.Override, err)
	}
	// worker-1 comes back; the cluster heals.
	if err := d.Nodes["worker-1"].SetFaults(talossim.Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Nodes["worker-1"].PowerOn(); err != nil {
		t.Fatal(err)
	}
	WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
}

// NewOperationsCluster is the demo cluster the operation tests run on: Talos
// v1.13.0 with the installers of v1.13.0, v1.13.1 and v1.13.2 to pull,
// Kubernetes v1.35.2 (a minor below the newest), etcd snapshots of the real
// etcd behind its kube-apiserver, and a controller that polls operations
// fast and gives a rebooting node OperationStepTimeout to come back.
func NewOperationsCluster(t *testing.T) *DemoCluster {
	registry := talossim.NewRegistry("siderolabs/installer:v1.13.0", "siderolabs/installer:v1.13.1", "siderolabs/installer:v1.13.2")
	return NewDemoClusterWith(t, DemoSetup{Registry: registry, KubernetesVersion: "v1.35.2", RealEtcdSnapshots: true, Tune: func(o *ctrlcmd.Options) {
		o.InstallImage = "siderolabs/installer:v1.13.0"
		FastOperations(o)
	}})
}

// FastOperations has operations look at their nodes four times a second,
// and give a node the suite's step timeout.
func FastOperations(o *ctrlcmd.Options) {
	o.OperationPollInterval = 250 * time.Millisecond
	o.OperationStepTimeout = OperationStepTimeout
}
