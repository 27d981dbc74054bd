package integration

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

// operationStepTimeout is how long a node may take to come back from an
// operation's reboot in these tests: a node that never boots fails its
// step after it.
const operationStepTimeout = 15 * time.Second

// TestControllerRunsOperations: day-2 operations on a Ready 3+2 cluster,
// started with kubectl as an operator (or an admin where the API says so)
// and run by the controller through the real machinery client: a rolling
// reboot, a Talos upgrade through ImageService.Pull and
// LifecycleService.Upgrade, an etcd defragmentation, the refusals and the
// faults. Each disruptive run is checked against the nodes' timestamped
// phase history: at most one node away at any moment, so the three control
// planes keep etcd's quorum.
func TestControllerRunsOperations(t *testing.T) {
	registry := talossim.NewRegistry("siderolabs/installer:v1.13.0", "siderolabs/installer:v1.13.1", "siderolabs/installer:v1.13.2",
		"siderolabs/installer:v1.11.0")
	d := newDemoClusterWith(t, demoSetup{registry: registry, kubernetesVersion: "v1.35.2", realEtcdSnapshots: true, tune: func(o *ctrlcmd.Options) {
		o.InstallImage = "siderolabs/installer:v1.13.0"
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = operationStepTimeout
	}})
	t.Run("three control planes and two workers become Ready", d.becomesReady)
	t.Run("an operator reboots the cluster one node at a time", d.rollingReboot)
	t.Run("an operator upgrades Talos one node at a time, and new configs follow", d.talosUpgrade)
	t.Run("upgrades Talos refuses are refused with the reason, touching nothing", d.upgradeRefusals)
	t.Run("Kubernetes upgrades Kubernetes refuses are refused before any step", d.kubernetesUpgradeRefusals)
	t.Run("an operator upgrades Kubernetes in talosctl upgrade-k8s's order", d.kubernetesUpgrade)
	t.Run("an operation naming a machine of another cluster fails at once", d.foreignMachine)
	t.Run("etcd is defragmented one member at a time", d.etcdDefrag)
	t.Run("an admin rotates both CAs in Talos's three phases; kubectl works throughout", d.caRotation)
	t.Run("a controller killed mid-upgrade resumes on the same step", d.upgradeSurvivesRestart)
	t.Run("a node that refuses the upgrade fails only its step", d.upgradeRefusedByNode)
	t.Run("a deleted operation stops after its step in flight", d.deletedOperationStops)
	t.Run("a node that never comes back stops the rollout", d.nodeNeverBack)
	t.Run("an unhealthy cluster starts nothing unless an admin overrides", d.unhealthyClusterWaits)
	t.Run("backups go encrypted to an S3 server, on a schedule, to a retention", d.backups)
	t.Run("an admin shuts a worker, then the whole cluster down, and powers it on", d.shutdowns)
	t.Run("an admin resets nodes as Talos's wipe modes say, and they rejoin", d.nodeResets)
	t.Run("an admin resets and adds a foreign node, and reclaims a machine into another cluster", d.reclaims)
}

// createOperation creates a TalosOperation with kubectl as who.
func (d *demoCluster) createOperation(t *testing.T, who []string, name, spec string) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: %s, namespace: %s}\nspec:\n%s\n",
		name, d.ns, indent(strings.TrimSpace(spec), "  "))
	if out, err := cp.KubectlWithInput(d.ctx, []byte(manifest), append(who, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply TalosOperation %s: %v\n%s", name, err, out)
	}
}

// startOperation starts an operation with its start subresource, as the README shows.
func (d *demoCluster) startOperation(t *testing.T, who []string, name string) {
	t.Helper()
	out, err := cp.KubectlWithInput(d.ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(who, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.ns+"/talosoperations/"+name+"/start", "-f", "-")...)
	if err != nil {
		t.Fatalf("start %s: %v\n%s", name, err, out)
	}
}

// waitOperation waits until done holds for operation name.
func (d *demoCluster) waitOperation(t *testing.T, name, what string, done func(*v1alpha1.TalosOperation) bool) *v1alpha1.TalosOperation {
	t.Helper()
	var last *v1alpha1.TalosOperation
	err := wait.PollUntilContextTimeout(d.ctx, controllerPoll, clusterWait, true, func(ctx context.Context) (bool, error) {
		op, err := apiClient(t).IchorV1alpha1().TalosOperations(d.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = op
		return done(op), nil
	})
	if err != nil {
		t.Fatalf("operation %s: %s: %v; status %s", name, what, err, describeOperation(last))
	}
	return last
}

// startWatching starts operation name as who, watching it from before the
// start until cond holds for a version of it: a watch sees every status
// write, so a short-lived state (a step of a fast node) cannot slip between
// two polls, nor go by before the watch opens.
func (d *demoCluster) startWatching(t *testing.T, who []string, name, what string, cond func(*v1alpha1.TalosOperation) bool) *v1alpha1.TalosOperation {
	t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, clusterWait)
	defer cancel()
	w, err := apiClient(t).IchorV1alpha1().TalosOperations(d.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	d.startOperation(t, who, name)
	var last *v1alpha1.TalosOperation
	for ev := range w.ResultChan() {
		if op, ok := ev.Object.(*v1alpha1.TalosOperation); ok {
			last = op
			if cond(op) {
				return op
			}
		}
	}
	t.Fatalf("operation %s: the watch ended before %s; last %s", name, what, describeOperation(last))
	return nil
}

// waitOperationEnds waits until operation name ended, and wants it in phase want.
func (d *demoCluster) waitOperationEnds(t *testing.T, name string, want v1alpha1.OperationPhase) *v1alpha1.TalosOperation {
	t.Helper()
	op := d.waitOperation(t, name, "ended", func(op *v1alpha1.TalosOperation) bool {
		return op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed
	})
	if op.Status.Phase != want {
		t.Fatalf("operation %s ended %s, want %s: %s", name, op.Status.Phase, want, describeOperation(op))
	}
	return op
}

func describeOperation(op *v1alpha1.TalosOperation) string {
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

// stepOrder is the machines of op's steps in the order they started.
func stepOrder(op *v1alpha1.TalosOperation) []string {
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

// versions is the Talos version each of demo's nodes runs.
func (d *demoCluster) versions() map[string]string {
	out := map[string]string{}
	for name, n := range d.nodes {
		out[name] = n.Version()
	}
	return out
}

// workloadClient is a client of demo's own Kubernetes API, as its admin.
func (d *demoCluster) workloadClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	rc, _ := d.bootstrapAccess(t)
	return kubernetes.NewForConfigOrDie(rc)
}

// podOn creates pod name in demo's default namespace, bound to node (the
// simulated kubelet reports it Running), for a drain to evict.
func (d *demoCluster) podOn(t *testing.T, wl kubernetes.Interface, name, node string) {
	t.Helper()
	// The simulated controller manager runs no ServiceAccount controller.
	if _, err := wl.CoreV1().ServiceAccounts("default").Create(d.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := wl.CoreV1().Pods("default").Create(d.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: name, Image: name + ":1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rollingReboot: an operator reboots the cluster one node at a time.
func (d *demoCluster) rollingReboot(t *testing.T) {
	ctx := d.ctx
	// A pod runs on worker-2 in the cluster: the reboot drains it first, through the Eviction API.
	wl := d.workloadClient(t)
	d.podOn(t, wl, "web", "worker-2")
	before, since := d.reboots(), time.Now()
	d.createOperation(t, operator, "reboot-all", "clusterName: demo\ntype: reboot")
	// Created Pending: nothing runs until it is started.
	if op := d.waitOperation(t, "reboot-all", "pending", func(op *v1alpha1.TalosOperation) bool { return true }); op.Status.Phase != v1alpha1.OperationPending {
		t.Fatalf("a created operation is %s", op.Status.Phase)
	}
	d.startOperation(t, operator, "reboot-all")
	if out, err := cp.Kubectl(ctx, append(operator, "wait", "-n", d.ns, "--for=condition=Succeeded", "talosoperation/reboot-all", "--timeout=180s")...); err != nil {
		t.Fatalf("kubectl wait --for=condition=Succeeded: %v\n%s\n%s", err, out,
			describeOperation(d.waitOperation(t, "reboot-all", "read", func(*v1alpha1.TalosOperation) bool { return true })))
	}
	op := d.waitOperationEnds(t, "reboot-all", v1alpha1.OperationSucceeded)
	if got, want := stepOrder(op), []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}; !slices.Equal(got, want) {
		t.Errorf("steps ran in the order %v, want control planes first: %v", got, want)
	}
	rebootedOnce(t, before, d.reboots())
	if most, when := mostAwayAtOnce(d.nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	for _, s := range op.Status.Steps {
		if s.BootID == "" || s.StartedAt == nil || s.CompletedAt == nil || s.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("step %+v", s)
		}
	}
	waitBudgetFree(ctx, t, d.ns, "demo")
	out := mustKubectl(ctx, t, append(operator, "get", "talosoperations", "-n", d.ns, "reboot-all")...)
	if !strings.Contains(out, "PROGRESS") || !strings.Contains(out, "5/5") || !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl get talosoperations:\n%s", out)
	}
	for _, name := range []string{"cp-1", "worker-2"} {
		waitEventSaying(ctx, t, d.ns, "reboot-all", corev1.EventTypeNormal, "StepSucceeded", name+": rebooted")
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
func (d *demoCluster) talosUpgrade(t *testing.T) {
	ctx := d.ctx
	before, since := d.reboots(), time.Now()
	d.createOperation(t, operator, "upgrade-1-13-1", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.1}\nmaxUnavailable: 2")
	d.startOperation(t, operator, "upgrade-1-13-1")
	// Progress shows while it runs.
	d.waitOperation(t, "upgrade-1-13-1", "a step running", func(op *v1alpha1.TalosOperation) bool {
		return op.Status.Phase == v1alpha1.OperationRunning && slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
			return s.Phase == v1alpha1.OperationRunning
		})
	})
	op := d.waitOperationEnds(t, "upgrade-1-13-1", v1alpha1.OperationSucceeded)
	if got, want := stepOrder(op), []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}; !slices.Equal(got, want) {
		t.Errorf("steps ran in the order %v, want %v", got, want)
	}
	for name, v := range d.versions() {
		if v != "v1.13.1" {
			t.Errorf("%s runs Talos %s after the upgrade", name, v)
		}
	}
	// Control planes one at a time; the two workers together (maxUnavailable: 2).
	controlPlanes := map[string]*talossim.Node{"cp-1": d.nodes["cp-1"], "cp-2": d.nodes["cp-2"], "cp-3": d.nodes["cp-3"]}
	if most, when := mostAwayAtOnce(controlPlanes, since); most != 1 {
		t.Errorf("at most %d control planes were away at once (%s), want exactly 1", most, when)
	}
	if most, when := mostAwayAtOnce(d.nodes, since); most > 2 {
		t.Errorf("%d nodes were away at once (%s), want at most 2", most, when)
	}
	rebootedOnce(t, before, d.reboots())
	for name := range d.nodes {
		waitMachine(ctx, t, d.ns, name, "reports Talos v1.13.1", func(m *v1alpha1.TalosMachine) bool { return m.Status.TalosVersion == "v1.13.1" })
	}
	waitCluster(ctx, t, d.ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	// The cluster now runs v1.13.1, so every config's installer image moves
	// there too: a no-reboot change, so a machine added later installs it.
	for name, n := range d.nodes {
		waitMachine(ctx, t, d.ns, name, "runs a config with the v1.13.1 installer", func(*v1alpha1.TalosMachine) bool {
			return n.InstallImage() == "siderolabs/installer:v1.13.1"
		})
	}
	if after := d.reboots(); !maps.Equal(after, func() map[string]int {
		m := maps.Clone(before)
		for k := range m {
			m[k]++
		}
		return m
	}()) {
		t.Errorf("the installer image change rebooted nodes: before %v, after %v", before, after)
	}
	waitBudgetFree(ctx, t, d.ns, "demo")
}

// kubernetesUpgradeRefusals: a path Kubernetes refuses (skipping a minor,
// going down) and a version the nodes' Talos does not run end the
// operation Failed before any step, with the reason; nothing moves.
func (d *demoCluster) kubernetesUpgradeRefusals(t *testing.T) {
	for _, tc := range []struct{ name, version, want string }{
		{"k8s-skips-a-minor", "v1.37.0", "one minor version at a time: from 1.35 go to 1.36 first"},
		{"k8s-downgrade", "v1.34.0", "Kubernetes does not downgrade"},
	} {
		d.createOperation(t, operator, tc.name, "clusterName: demo\ntype: kubernetes-upgrade\nkubernetesUpgrade: {version: "+tc.version+"}")
		d.startOperation(t, operator, tc.name)
		op := d.waitOperationEnds(t, tc.name, v1alpha1.OperationFailed)
		if len(op.Status.Steps) != 0 {
			t.Errorf("%s: steps %+v recorded for a refused upgrade", tc.name, op.Status.Steps)
		}
		c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, tc.want) {
			t.Errorf("%s: Succeeded condition %+v, want PrecheckFailed saying %q", tc.name, c, tc.want)
		}
		waitEventSaying(d.ctx, t, d.ns, tc.name, corev1.EventTypeWarning, "Failed", tc.want)
	}
	for name := range d.nodes {
		m, err := d.machines.Get(d.ctx, name, metav1.GetOptions{})
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
func (d *demoCluster) kubernetesUpgrade(t *testing.T) {
	ctx := d.ctx
	const target = "v1.36.0"
	before, since := d.reboots(), time.Now()
	d.createOperation(t, operator, "kubernetes-1-36", "clusterName: demo\ntype: kubernetes-upgrade\nkubernetesUpgrade: {version: "+target+"}")
	d.startOperation(t, operator, "kubernetes-1-36")
	op := d.waitOperationEnds(t, "kubernetes-1-36", v1alpha1.OperationSucceeded)

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
	if most, when := mostAwayAtOnce(d.nodes, since); most != 0 {
		t.Errorf("%d nodes were away at once (%s) during a Kubernetes upgrade, want none", most, when)
	}
	if after := d.reboots(); !maps.Equal(before, after) {
		t.Errorf("the Kubernetes upgrade rebooted nodes: before %v, after %v", before, after)
	}

	// The nodes show it: static pods at the new images, Ready; every Node
	// Ready at the new kubelet version.
	admin, err := d.kube.WaitReady(ctx, d.endpoint)
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
	waitEventSaying(ctx, t, d.ns, "kubernetes-1-36", corev1.EventTypeNormal, "KubeProxyApplied", "DaemonSet kube-system/kube-proxy: kube-proxy "+target)
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
	if running != len(d.nodes) {
		t.Errorf("%d kube-proxy pods run %s, want one per node (%d)", running, target, len(d.nodes))
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
	clusters := apiClient(t).IchorV1alpha1().TalosClusters(d.ns)
	c, err := clusters.Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.KubernetesVersion != target {
		t.Errorf("spec.kubernetesVersion = %s after the upgrade, want %s", c.Spec.KubernetesVersion, target)
	}
	for name := range d.nodes {
		waitMachine(ctx, t, d.ns, name, "has no Kubernetes versions of its own", func(m *v1alpha1.TalosMachine) bool { return m.Status.Kubernetes == nil })
	}
	// status.kubernetesVersion is the lowest the cluster runs, observed.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, controllerWait, true, func(ctx context.Context) (bool, error) {
		c, err = clusters.Get(ctx, "demo", metav1.GetOptions{})
		return err == nil && c.Status.KubernetesVersion == target, err
	}); err != nil {
		t.Errorf("status.kubernetesVersion = %q, want %s: %v", c.Status.KubernetesVersion, target, err)
	}
	waitCluster(ctx, t, d.ns, "demo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	waitEventSaying(ctx, t, d.ns, "kubernetes-1-36", corev1.EventTypeNormal, "KubernetesVersionFollowed", "v1.35.2 -> "+target)
	waitBudgetFree(ctx, t, d.ns, "demo")
}

// upgradeRefusals: a downgrade ends the operation Failed before any step
// (an operator's, without an admin's override); an image that cannot be
// pulled and an unknown version end it Failed at its first step, with the
// reason, and no node is touched.
func (d *demoCluster) upgradeRefusals(t *testing.T) {
	before := d.reboots()
	d.createOperation(t, operator, "downgrade", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.11.0}")
	d.startOperation(t, operator, "downgrade")
	if op := d.waitOperationEnds(t, "downgrade", v1alpha1.OperationFailed); len(op.Status.Steps) != 0 {
		t.Errorf("downgrade: steps %+v, want none", op.Status.Steps)
	} else if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil ||
		c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, "does not downgrade Talos") {
		t.Errorf("downgrade: Succeeded condition %+v", c)
	}
	for _, tc := range []struct{ name, version, want string }{
		{"unpullable", "v1.13.9", "pull the installer"},
		{"skips-minors", "v1.15.0", "upgrades go through every minor release"},
	} {
		d.createOperation(t, operator, tc.name, "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: "+tc.version+"}")
		d.startOperation(t, operator, tc.name)
		op := d.waitOperationEnds(t, tc.name, v1alpha1.OperationFailed)
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
		waitEventSaying(d.ctx, t, d.ns, tc.name, corev1.EventTypeWarning, "StepFailed", tc.want)
	}
	if after := d.reboots(); !maps.Equal(before, after) {
		t.Errorf("refused upgrades rebooted nodes: before %v, after %v", before, after)
	}
	for name, v := range d.versions() {
		if v != "v1.13.1" {
			t.Errorf("%s runs %s after refused upgrades", name, v)
		}
	}
	// A version that is not one is refused at create, with the field.
	out, err := cp.KubectlWithInput(d.ctx, []byte(fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: not-a-version, namespace: %s}
spec: {clusterName: demo, type: talos-upgrade, talosUpgrade: {version: latest}}
`, d.ns)), append(operator, "apply", "-f", "-")...)
	if err == nil || !strings.Contains(fmt.Sprint(err, out), "spec.talosUpgrade.version") {
		t.Errorf("an upgrade to %q: %v\n%s", "latest", err, out)
	}
}

// foreignMachine: an operation naming a machine of another cluster fails at once.
func (d *demoCluster) foreignMachine(t *testing.T) {
	before := d.reboots()
	d.createOperation(t, operator, "reboot-foreign", "clusterName: demo\ntype: reboot\nmachines: [worker-1, rejected]")
	d.startOperation(t, operator, "reboot-foreign")
	op := d.waitOperationEnds(t, "reboot-foreign", v1alpha1.OperationFailed)
	c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
	if c == nil || c.Reason != v1alpha1.OperationReasonInvalidTarget || !strings.Contains(c.Message, "rejected is not an approved TalosMachine of TalosCluster demo") {
		t.Errorf("Succeeded condition %+v", c)
	}
	if len(op.Status.Steps) != 0 {
		t.Errorf("steps %+v of an operation that could not start", op.Status.Steps)
	}
	if after := d.reboots(); !maps.Equal(before, after) {
		t.Errorf("nodes rebooted: before %v, after %v", before, after)
	}
}

// etcdDefrag: etcd is defragmented one member at a time, on the control
// planes only, while its NOSPACE alarm is raised, and the alarm is disarmed.
func (d *demoCluster) etcdDefrag(t *testing.T) {
	// Writes leave the members' backends over the quota with fragmentation,
	// while the data in use stays under it.
	const writes = 1000
	inUse := d.etcd.Members()[0].DBSizeInUse + writes*512
	d.etcd.SetQuotaBackendBytes(inUse + writes*256/2)
	t.Cleanup(func() { d.etcd.SetQuotaBackendBytes(0) })
	d.etcd.AdvanceRevision(writes)
	if !d.etcd.Alarmed() {
		t.Fatal("NOSPACE was not raised")
	}
	d.createOperation(t, operator, "defrag", "clusterName: demo\ntype: etcd-defrag")
	d.startOperation(t, operator, "defrag")
	op := d.waitOperationEnds(t, "defrag", v1alpha1.OperationSucceeded)
	if got := stepOrder(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Errorf("defragmented %v, want the three control planes in order", got)
	}
	for _, s := range op.Status.Steps {
		if !strings.Contains(s.Message, "defragmented member") || !strings.Contains(s.Message, "in use") {
			t.Errorf("step %+v does not report the database", s)
		}
	}
	if last := op.Status.Steps[2]; !strings.Contains(last.Message, "disarmed NOSPACE") || d.etcd.Alarmed() {
		t.Errorf("the alarm after the last step (%q): raised %v", last.Message, d.etcd.Alarmed())
	}
	waitBudgetFree(d.ctx, t, d.ns, "demo")
}

// upgradeSurvivesRestart: the controller stopped while a control plane is
// away for its upgrade resumes on that step: every node is upgraded and
// rebooted exactly once, one at a time.
func (d *demoCluster) upgradeSurvivesRestart(t *testing.T) {
	before, since := d.reboots(), time.Now()
	d.createOperation(t, operator, "upgrade-1-13-2", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.2}")
	inFlight := d.startWatching(t, operator, "upgrade-1-13-2", "cp-2's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 1 && op.Status.Steps[1].Phase == v1alpha1.OperationRunning
	}).Status.Steps[1].Machine
	d.controller.stop()
	t.Logf("stopped the controller while %s's upgrade step runs (node %s)", inFlight, d.nodes[inFlight].Phase())
	d.controller = runController(d.parent, d.tune)
	op := d.waitOperationEnds(t, "upgrade-1-13-2", v1alpha1.OperationSucceeded)
	rebootedOnce(t, before, d.reboots())
	if most, when := mostAwayAtOnce(d.nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	for name, v := range d.versions() {
		if v != "v1.13.2" {
			t.Errorf("%s runs %s", name, v)
		}
	}
	if got := stepOrder(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}) {
		t.Errorf("steps %v", got)
	}
	waitBudgetFree(d.ctx, t, d.ns, "demo")
}

// upgradeRefusedByNode: a node whose installer fails fails only its step;
// the rollout stops there and the next node is not touched.
func (d *demoCluster) upgradeRefusedByNode(t *testing.T) {
	d.registry.Add("siderolabs/installer:v1.13.3")
	if err := d.nodes["worker-1"].SetFaults(talossim.Faults{UpgradeFails: "cannot write the system disk"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.nodes["worker-1"].SetFaults(talossim.Faults{}) })
	before := d.reboots()
	d.createOperation(t, operator, "upgrade-1-13-3", "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: v1.13.3}")
	d.startOperation(t, operator, "upgrade-1-13-3")
	op := d.waitOperationEnds(t, "upgrade-1-13-3", v1alpha1.OperationFailed)
	phases := map[string]v1alpha1.OperationPhase{}
	for _, s := range op.Status.Steps {
		phases[s.Machine] = s.Phase
	}
	want := map[string]v1alpha1.OperationPhase{"cp-1": "Succeeded", "cp-2": "Succeeded", "cp-3": "Succeeded", "worker-1": "Failed", "worker-2": "Pending"}
	if !maps.Equal(phases, want) {
		t.Errorf("steps %v, want %v\n%s", phases, want, describeOperation(op))
	}
	waitEventSaying(d.ctx, t, d.ns, "upgrade-1-13-3", corev1.EventTypeWarning, "StepFailed", "cannot write the system disk")
	after := d.reboots()
	if after["worker-1"] != before["worker-1"] || after["worker-2"] != before["worker-2"] {
		t.Errorf("the workers rebooted: before %v, after %v", before, after)
	}
	if v := d.nodes["worker-2"].Version(); v != "v1.13.2" {
		t.Errorf("worker-2, after the failed step, runs %s", v)
	}
	waitBudgetFree(d.ctx, t, d.ns, "demo")
}

// deletedOperationStops: deleting a running operation stops it after the
// step in flight: the object stays until that node is back, and no other
// node is rebooted.
func (d *demoCluster) deletedOperationStops(t *testing.T) {
	waitCluster(d.ctx, t, d.ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
	before := d.reboots()
	d.createOperation(t, operator, "reboot-deleted", "clusterName: demo\ntype: reboot")
	d.startWatching(t, operator, "reboot-deleted", "cp-1's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 0 && op.Status.Steps[0].Phase == v1alpha1.OperationRunning
	})
	mustKubectl(d.ctx, t, append(operator, "delete", "talosoperation", "-n", d.ns, "reboot-deleted", "--wait=true", "--timeout=120s")...)
	if _, err := apiClient(t).IchorV1alpha1().TalosOperations(d.ns).Get(d.ctx, "reboot-deleted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted operation is still there: %v", err)
	}
	if d.nodes["cp-1"].Phase() != talossim.PhaseRunning {
		t.Errorf("the operation was gone before cp-1 was back: %s", d.nodes["cp-1"].Phase())
	}
	after := d.reboots()
	for name := range d.nodes {
		want := before[name]
		if name == "cp-1" {
			want++
		}
		if after[name] != want {
			t.Errorf("%s rebooted %d times, want %d", name, after[name]-before[name], want-before[name])
		}
	}
	waitEventSaying(d.ctx, t, d.ns, "reboot-deleted", corev1.EventTypeNormal, "Stopped", "stopped after the step in flight")
	waitBudgetFree(d.ctx, t, d.ns, "demo")
}

// nodeNeverBack: a node that does not come back from its reboot fails its
// step after the step timeout; the rollout stops, and nothing else is touched.
func (d *demoCluster) nodeNeverBack(t *testing.T) {
	waitCluster(d.ctx, t, d.ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
	if err := d.nodes["worker-1"].SetFaults(talossim.Faults{NeverBoots: true}); err != nil {
		t.Fatal(err)
	}
	before := d.reboots()
	d.createOperation(t, operator, "reboot-workers", "clusterName: demo\ntype: reboot\nmachines: [worker-1, worker-2]")
	d.startOperation(t, operator, "reboot-workers")
	op := d.waitOperationEnds(t, "reboot-workers", v1alpha1.OperationFailed)
	first, second := op.Status.Steps[0], op.Status.Steps[1]
	if first.Machine != "worker-1" || first.Phase != v1alpha1.OperationFailed || !strings.Contains(first.Message, "did not come back within") {
		t.Errorf("first step %+v", first)
	}
	if second.Phase != v1alpha1.OperationPending {
		t.Errorf("second step %+v ran", second)
	}
	if after := d.reboots(); after["worker-2"] != before["worker-2"] {
		t.Errorf("worker-2 rebooted after worker-1 failed")
	}
	waitBudgetFree(d.ctx, t, d.ns, "demo")
}

// unhealthyClusterWaits: with worker-1 still off, a started operation waits
// Pending, saying why; an operator cannot let it past the check; an admin
// can, through the cluster's override, and the operation uses it up.
func (d *demoCluster) unhealthyClusterWaits(t *testing.T) {
	ctx := d.ctx
	waitMachine(ctx, t, d.ns, "worker-1", "not Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase != v1alpha1.MachinePhaseReady })
	d.createOperation(t, operator, "reboot-worker-2", "clusterName: demo\ntype: reboot\nmachines: [worker-2]")
	d.startOperation(t, operator, "reboot-worker-2")
	d.waitOperation(t, "reboot-worker-2", "waiting for a healthy cluster", func(op *v1alpha1.TalosOperation) bool {
		c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
		return op.Status.Phase == v1alpha1.OperationPending && c != nil && c.Reason == v1alpha1.OperationReasonClusterNotHealthy &&
			strings.Contains(c.Message, "worker-1")
	})
	override := []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"Override","check":"ClusterHealth","reason":"worker-1 is being replaced"}`)
	path := "/apis/ichor.dev/v1alpha1/namespaces/" + d.ns + "/talosclusters/demo/override"
	if out, err := cp.KubectlWithInput(ctx, override, append(operator, "create", "--raw", path, "-f", "-")...); err == nil || !strings.Contains(fmt.Sprint(err, out), "override") {
		t.Fatalf("an operator's override: %v\n%s", err, out)
	}
	if out, err := cp.KubectlWithInput(ctx, override, append(admin, "create", "--raw", path, "-f", "-")...); err != nil {
		t.Fatalf("an admin's override: %v\n%s", err, out)
	}
	op := d.waitOperationEnds(t, "reboot-worker-2", v1alpha1.OperationSucceeded)
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionHealthOverridden); c == nil || !strings.Contains(c.Message, "carol") {
		t.Errorf("ClusterHealthOverridden %+v, want it naming carol", c)
	}
	waitEventSaying(ctx, t, d.ns, "reboot-worker-2", corev1.EventTypeWarning, "OverrideUsed", "worker-1 is being replaced")
	c, err := apiClient(t).IchorV1alpha1().TalosClusters(d.ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil || c.Status.Override != nil {
		t.Errorf("the override after it was used: %+v, %v", c.Status.Override, err)
	}
	// worker-1 comes back; the cluster heals.
	if err := d.nodes["worker-1"].SetFaults(talossim.Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := d.nodes["worker-1"].PowerOn(); err != nil {
		t.Fatal(err)
	}
	waitCluster(ctx, t, d.ns, "demo", v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady)
}
