package operation

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/imageref"
	"ichor.dev/ichor/pkg/kubeupgrade"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// A kubernetes-upgrade moves the cluster's Kubernetes components in
// talosctl upgrade-k8s's order: kube-apiserver on each control plane in
// turn, then kube-controller-manager, kube-scheduler and kube-proxy the
// same way, then the kubelet on every machine, control planes first. Each
// step sets the component's version in the machine's status.kubernetes,
// which its rendered config follows; the machine config controller applies
// that config as any other change (without a reboot; a new kube-apiserver
// holds the cluster's disruption budget while it restarts), and the step
// ends when the node itself shows the component at the new version: its
// static pod Ready at the new image, or its Node Ready at the new kubelet
// version. Once every step has, the cluster's spec.kubernetesVersion
// follows (so new machines join at it) and the per-machine versions go.
//
// kube-proxy: its steps move cluster.proxy.image in the control planes'
// configs, which Talos renders the kube-proxy DaemonSet's bootstrap
// manifest from; Talos creates its bootstrap manifests' objects once and
// leaves them alone after, so the last kube-proxy step applies the
// DaemonSet from its node's manifest, as talosctl upgrade-k8s's manifest
// sync does, and ends once it rolled out (rollOutKubeProxy).

// kubernetesSteps are the steps of a kubernetes-upgrade of targets
// (control planes first): each control-plane component on each control
// plane, then every machine's kubelet.
func kubernetesSteps(_ *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	var steps []v1alpha1.OperationStep
	for _, c := range v1alpha1.KubernetesComponents {
		for _, m := range targets {
			if c == v1alpha1.ComponentKubelet || render.MachineRole(m) == v1alpha1.MachineRoleControlPlane {
				steps = append(steps, v1alpha1.OperationStep{Machine: m.Name, Component: c, Phase: v1alpha1.OperationPending})
			}
		}
	}
	return steps
}

// checkKubernetes refuses a kubernetes-upgrade that Kubernetes or Talos
// would refuse, before anything moves: a path other than to the same or the
// next minor version, a version a machine's Talos does not run, and objects
// of API resources the new version no longer serves.
func (r *Reconciler) checkKubernetes(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	from, to := cluster.Spec.KubernetesVersion, op.Spec.KubernetesUpgrade.Version
	if err := kubeupgrade.CheckPath(from, to); err != nil {
		return fmt.Sprintf("spec.kubernetesUpgrade.version: %v", err), nil
	}
	for _, m := range targets {
		for _, c := range v1alpha1.KubernetesComponents {
			// A kubernetes-upgrade that stopped partway left this.
			if pinned := m.Status.Kubernetes.Version(c); pinned != "" && kubeupgrade.CheckPath(pinned, to) != nil {
				return fmt.Sprintf("spec.kubernetesUpgrade.version: TalosMachine %s runs %s %s, set by a kubernetes-upgrade that did not finish, "+
					"and Kubernetes cannot go from there to %s; upgrade to %s or later to finish it", m.Name, c, pinned, to, pinned), nil
			}
		}
		talosVersion := m.Status.TalosVersion
		if talosVersion == "" {
			talosVersion = render.ClusterVersion(cluster)
		}
		if err := render.SupportsKubernetes(talosVersion, to); err != nil {
			return fmt.Sprintf("spec.kubernetesUpgrade.version: TalosMachine %s runs Talos %s: %v; upgrade Talos first", m.Name, talosVersion, err), nil
		}
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		return "", fmt.Errorf("load the secrets bundle of TalosCluster %s: %w", cluster.Name, err)
	}
	s := &step{r: r, cluster: cluster, bundle: bundle}
	kube, err := s.kube()
	if err != nil {
		return "", err
	}
	var used []string
	if err := s.withAccess(ctx, func() (err error) {
		used, err = kubeupgrade.StillUsed(ctx, kube.Discovery(), from, to)
		return err
	}); err != nil {
		return "", fmt.Errorf("look for objects of the APIs Kubernetes %s removes: %w", to, err)
	}
	if len(used) > 0 {
		return fmt.Sprintf("the cluster still holds objects of %s, which Kubernetes %s no longer serves: migrate them to a served API version first",
			strings.Join(used, ", "), to), nil
	}
	return "", nil
}

// startKubernetes sets the step's component to the new version on its
// machine, once every other machine is Ready.
func startKubernetes(ctx context.Context, s *step) (ctrl.Result, error) {
	rec := s.record()
	target := s.x.op.Spec.KubernetesUpgrade.Version
	if msg := s.othersNotReady(false); msg != "" {
		return s.wait("%s", msg)
	}
	if err := s.begin(ctx, "", "%s to Kubernetes %s", rec.Component, target); err != nil {
		return ctrl.Result{}, err
	}
	return startKubernetesVersion(ctx, s)
}

// startKubernetesVersion sets the step's component to the new version in
// its machine's status.kubernetes (again, if the controller stopped before
// it did), which its config follows.
func startKubernetesVersion(ctx context.Context, s *step) (ctrl.Result, error) {
	rec := s.record()
	target := s.x.op.Spec.KubernetesUpgrade.Version
	versions := &v1alpha1.KubernetesVersions{}
	versions.SetVersion(rec.Component, target)
	if render.MachineRole(s.m) != v1alpha1.MachineRoleControlPlane {
		// A worker's config has only its kubelet; the rest follow at
		// once, so that the cluster's version changes nothing later.
		for _, c := range v1alpha1.KubernetesComponents {
			versions.SetVersion(c, target)
		}
	}
	if err := setKubernetesVersions(ctx, s.r.Client, s.m, versions); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// followKubernetes ends the step once the node runs the component at the
// new version: its applied config says so, and Kubernetes shows it.
func followKubernetes(ctx context.Context, s *step) (ctrl.Result, error) {
	rec := s.record()
	target := s.x.op.Spec.KubernetesUpgrade.Version
	if s.m.Status.Kubernetes.Version(rec.Component) != target {
		// Recorded Running, but stopped before setting the version.
		return startKubernetesVersion(ctx, s)
	}
	waiting, err := s.componentAt(ctx, rec.Component, target)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting == "" {
		return s.done(ctx, "%s runs Kubernetes %s", rec.Component, target)
	}
	if s.timedOut() {
		return s.failed(ctx, "%s did not reach Kubernetes %s within %s: %s", rec.Component, target, s.r.Options.StepTimeout, waiting)
	}
	return s.wait("%s", waiting)
}

// componentAt says what the step still waits for before component c of
// its node runs version, or "".
func (s *step) componentAt(ctx context.Context, c v1alpha1.KubernetesComponent, version string) (string, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	raw, err := s.node.Config(cctx)
	if err != nil {
		return fmt.Sprintf("reading the node's config: %v", err), nil
	}
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return "", fmt.Errorf("parse the config of TalosMachine %s: %w", s.m.Name, err)
	}
	image := render.ComponentImage(cfg, c)
	if imageref.Tag(image) != version {
		return fmt.Sprintf("waiting for the machine's config with %s %s to be applied (the node's config has %s)", c, version, image), nil
	}
	node := s.m.Status.NodeName
	if node == "" {
		return "waiting for the machine's Node name", nil
	}
	kube, err := s.kube()
	if err != nil {
		return "", err
	}
	switch c {
	case v1alpha1.ComponentAPIServer, v1alpha1.ComponentControllerManager, v1alpha1.ComponentScheduler:
		name := string(c) + "-" + node
		var pods *corev1.PodList
		if err := s.withAccess(cctx, func() (err error) {
			pods, err = kube.CoreV1().Pods(metav1.NamespaceSystem).List(cctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			return err
		}); err != nil {
			return fmt.Sprintf("reading the static pod %s: %v", name, err), nil
		}
		i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == name })
		if i < 0 {
			return fmt.Sprintf("waiting for the static pod %s", name), nil
		}
		pod := &pods.Items[i]
		if got := podImage(pod, string(c)); imageref.Tag(got) != version {
			return fmt.Sprintf("waiting for the static pod %s to run %s (it runs %s)", name, version, got), nil
		}
		if !podReady(pod) {
			return fmt.Sprintf("waiting for the static pod %s at %s to be Ready", name, version), nil
		}
	case v1alpha1.ComponentProxy:
		if s.lastOf(c) {
			return s.rollOutKubeProxy(cctx, kube, version)
		}
	case v1alpha1.ComponentKubelet:
		n, err := kube.CoreV1().Nodes().Get(cctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("waiting for the Node %s", node), nil
		}
		if err != nil {
			return fmt.Sprintf("reading the Node %s: %v", node, err), nil
		}
		if got := n.Status.NodeInfo.KubeletVersion; got != version {
			return fmt.Sprintf("waiting for the Node %s to report kubelet %s (it reports %s)", node, version, got), nil
		}
		if !workload.NodeReady(n) {
			return fmt.Sprintf("waiting for the Node %s to be Ready", node), nil
		}
	}
	return "", nil
}

// lastOf reports whether the step is the operation's last of component c.
func (s *step) lastOf(c v1alpha1.KubernetesComponent) bool {
	steps := s.x.op.Status.Steps
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Component == c {
			return i == s.i
		}
	}
	return false
}

// rollOutKubeProxy rolls kube-proxy's DaemonSet out at version from the
// step's control plane's bootstrap manifest, once every control plane's
// config has that version (the last kube-proxy step), as talosctl
// upgrade-k8s's manifest sync does (workload.ApplyKubeProxy). It says what
// the rollout still waits for, or "". A cluster without the DaemonSet
// (cluster.proxy.disabled, or removed for another proxy) has nothing to
// roll out; the controller never creates it.
func (s *step) rollOutKubeProxy(ctx context.Context, kube kubernetes.Interface, version string) (string, error) {
	objects, err := s.node.BootstrapManifest(ctx, talos.ManifestKubeProxy)
	if err != nil {
		return fmt.Sprintf("reading the node's bootstrap manifest %s: %v", talos.ManifestKubeProxy, err), nil
	}
	want, err := workload.KubeProxyDaemonSet(objects)
	if err != nil || want == nil {
		return "", err
	}
	if got := workload.KubeProxyImage(want); imageref.Tag(got) != version {
		return fmt.Sprintf("waiting for the node's bootstrap manifest %s to have kube-proxy %s (it has %s)", talos.ManifestKubeProxy, version, got), nil
	}
	var ds *appsv1.DaemonSet
	err = s.withAccess(ctx, func() (err error) {
		ds, err = kube.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, workload.KubeProxy, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return fmt.Sprintf("reading the DaemonSet %s/%s: %v", metav1.NamespaceSystem, workload.KubeProxy, err), nil
	}
	if workload.KubeProxyImage(ds) != workload.KubeProxyImage(want) {
		if err := s.withAccess(ctx, func() error { return workload.ApplyKubeProxy(ctx, kube, want) }); err != nil {
			return "", err
		}
		events.Record(s.r.Recorder, s.x.op, nil, v1alpha1.EventKubeProxyApplied, "Apply",
			"DaemonSet %s/%s: kube-proxy %s, from %s's bootstrap manifest", metav1.NamespaceSystem, workload.KubeProxy, version, s.m.Name)
		return fmt.Sprintf("applied the DaemonSet %s/%s at %s; waiting for it to roll out", metav1.NamespaceSystem, workload.KubeProxy, version), nil
	}
	return workload.RolloutWaits(ds), nil
}

// finishKubernetes makes the cluster's spec.kubernetesVersion follow the
// upgrade, through the subresource that writes that field alone, and then
// drops the per-machine versions, which the cluster's now equals.
func (r *Reconciler) finishKubernetes(ctx context.Context, x *run) error {
	op := x.op
	target := op.Spec.KubernetesUpgrade.Version
	cluster, err := r.cluster(ctx, op)
	if err != nil {
		return fmt.Errorf("read TalosCluster %s: %w", op.Spec.ClusterName, err)
	}
	if cluster.Spec.KubernetesVersion != target {
		from := cluster.Spec.KubernetesVersion
		cluster.Spec.KubernetesVersion = target
		if err := r.Client.SubResource("kubernetes-version").Update(ctx, cluster); err != nil {
			return fmt.Errorf("set spec.kubernetesVersion of TalosCluster %s to %s: %w", cluster.Name, target, err)
		}
		events.Record(r.Recorder, op, nil, v1alpha1.EventKubernetesVersion, "Finish",
			"TalosCluster %s: spec.kubernetesVersion %s -> %s", cluster.Name, from, target)
		log.FromContext(ctx).Info("Cluster Kubernetes version follows", "from", from, "to", target)
	}
	var machines v1alpha1.TalosMachineList
	if err := r.APIReader.List(ctx, &machines, client.InNamespace(op.Namespace)); err != nil {
		return fmt.Errorf("list the machines of TalosCluster %s: %w", cluster.Name, err)
	}
	for i := range machines.Items {
		m := &machines.Items[i]
		if m.Spec.ClusterName == cluster.Name && m.Status.Kubernetes != nil {
			if err := setKubernetesVersions(ctx, r.Client, m, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// setKubernetesVersions merges the versions set in versions into m's
// status.kubernetes, or removes it when versions is nil. A merge patch
// writes exactly these fields, whatever a cached copy of m holds.
func setKubernetesVersions(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, versions *v1alpha1.KubernetesVersions) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"kubernetes": versions}})
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, m, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("set the Kubernetes versions of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

func podImage(p *corev1.Pod, container string) string {
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
