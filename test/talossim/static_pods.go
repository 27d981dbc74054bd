package talossim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Static pods: on a control plane, Talos's controllers turn the machine config into one config
// resource per control-plane component (APIServerConfig, ControllerManagerConfig, SchedulerConfig in
// the controlplane namespace), whose resource version goes up with every change, and write each
// component's static pod with that version in its talos.dev/config-version annotation; the kubelet
// runs it and publishes its mirror pod (kube-system/<component>-<nodename>) to the API server. Here the
// config resources are published with the node's other resources (publishDynamic) and the simulated
// kubelet keeps the mirror pods in step with them, Running and Ready, as `talosctl upgrade-k8s` and
// Ichor's kubernetes-upgrade watch them. The configuration files Talos renders for kube-apiserver
// (its structured authentication configuration, here) have a version of their own, the
// ConfigStatus static-pods resource's, which its pod carries in talos.dev/config-file-version: a
// change of them alone restarts kube-apiserver with the same config version. No container runs:
// the cluster's one real kube-apiserver and kube-controller-manager (kubernetes.go) serve every
// control plane whatever their pods say.

// staticPodComponents are the control-plane components with a static pod, by config resource type.
var staticPodComponents = []struct {
	id  resource.ID
	typ resource.Type
}{
	{k8s.APIServerConfigID, k8s.APIServerConfigType},
	{k8s.ControllerManagerConfigID, k8s.ControllerManagerConfigType},
	{k8s.SchedulerConfigID, k8s.SchedulerConfigType},
}

// controlPlaneConfigs are the component config resources of a control plane's config: the parts of
// it that shape each static pod.
func controlPlaneConfigs(cfg talosconfig.Provider) []resource.Resource {
	apiServer := cfg.K8sAPIServerConfig()

	api := k8s.NewAPIServerConfig(k8s.APIServerConfigID)
	api.TypedSpec().Image = apiServer.Image()
	api.TypedSpec().ControlPlaneEndpoint = clusterEndpoint(cfg).String()
	api.TypedSpec().ExtraArgs = argValues(apiServer.ExtraArgs())
	api.TypedSpec().EnvironmentVariables = apiServer.Env()

	controllerManager := cfg.K8sControllerManagerConfig()

	cm := k8s.NewControllerManagerConfig(k8s.ControllerManagerConfigID)
	cm.TypedSpec().Enabled = true
	cm.TypedSpec().Image = controllerManager.Image()
	cm.TypedSpec().ExtraArgs = argValues(controllerManager.ExtraArgs())
	cm.TypedSpec().EnvironmentVariables = controllerManager.Env()

	scheduler := cfg.K8sSchedulerConfig()

	sched := k8s.NewSchedulerConfig(k8s.SchedulerConfigID)
	sched.TypedSpec().Enabled = true
	sched.TypedSpec().Image = scheduler.Image()
	sched.TypedSpec().ExtraArgs = argValues(scheduler.ExtraArgs())
	sched.TypedSpec().EnvironmentVariables = scheduler.Env()

	files := k8s.NewConfigStatus(k8s.ControlPlaneNamespaceName, k8s.ConfigStatusStaticPodID)
	files.TypedSpec().Ready = true
	files.TypedSpec().Version = configFilesVersion(cfg)

	return []resource.Resource{api, cm, sched, files}
}

// configFilesVersion identifies the configuration files of kube-apiserver that cfg renders.
func configFilesVersion(cfg talosconfig.Provider) string {
	keys, _ := apiServerKeysOf(cfg)
	sum := sha256.Sum256(keys.authentication)

	return hex.EncodeToString(sum[:4])
}

func argValues(args map[string][]string) map[string]k8s.ArgValues {
	if len(args) == 0 {
		return nil
	}

	out := make(map[string]k8s.ArgValues, len(args))
	for k, v := range args {
		out[k] = k8s.ArgValues{Values: v}
	}

	return out
}

// publishControlPlaneConfigs puts the component configs of a running control plane, and removes them
// from any other node.
func publishControlPlaneConfigs(ctx context.Context, st state.State, v nodeView) error {
	if v.kubelet != nil && v.kubelet.controlPlane {
		for _, r := range controlPlaneConfigs(v.active) {
			if err := putResource(ctx, st, r); err != nil {
				return err
			}
		}

		return nil
	}

	for _, c := range staticPodComponents {
		if err := removeResource(ctx, st, resource.NewMetadata(k8s.ControlPlaneNamespaceName, c.typ, c.id, resource.VersionUndefined)); err != nil {
			return err
		}
	}

	return removeResource(ctx, st, k8s.NewConfigStatus(k8s.ControlPlaneNamespaceName, k8s.ConfigStatusStaticPodID).Metadata())
}

// staticPod is the mirror pod of one component as the kubelet last wrote it.
type staticPod struct {
	image   string
	version string
	// files is the version of kube-apiserver's configuration files.
	files string
}

// staticPodOf reads component c's config resource: its image and config version.
func staticPodOf(ctx context.Context, st state.State, id resource.ID, typ resource.Type) (staticPod, bool) {
	r, err := st.Get(ctx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, typ, id, resource.VersionUndefined))
	if err != nil {
		return staticPod{}, false
	}

	var image string

	switch spec := r.Spec().(type) {
	case *k8s.APIServerConfigSpec:
		image = spec.Image
	case *k8s.ControllerManagerConfigSpec:
		image = spec.Image
	case *k8s.SchedulerConfigSpec:
		image = spec.Image
	}

	pod := staticPod{image: image, version: r.Metadata().Version().String()}

	if typ == k8s.APIServerConfigType {
		if files, err := st.Get(ctx, k8s.NewConfigStatus(k8s.ControlPlaneNamespaceName, k8s.ConfigStatusStaticPodID).Metadata()); err == nil {
			if spec, ok := files.Spec().(*k8s.ConfigStatusSpec); ok {
				pod.files = spec.Version
			}
		}
	}

	return pod, true
}

// mirrorPods keeps a control plane's mirror pods in step with its component configs.
type mirrorPods struct {
	client kubernetes.Interface
	spec   kubeletSpec
	st     state.State
	node   *corev1.Node
	synced map[string]staticPod // by pod name
	// apiServerSettled reports whether kube-apiserver runs the node's config: its new pod waits for it.
	apiServerSettled func() bool
}

// sync writes the mirror pod of every component whose config changed since the last sync: the old
// pod is deleted and the new one created and reported Ready, as the kubelet does for a static pod
// whose manifest changed.
func (m *mirrorPods) sync(ctx context.Context) error {
	if m.node == nil {
		node, err := m.client.CoreV1().Nodes().Get(ctx, m.spec.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}

		m.node, m.synced = node, map[string]staticPod{}
	}

	for _, c := range staticPodComponents {
		want, ok := staticPodOf(ctx, m.st, c.id, c.typ)
		name := string(c.id) + "-" + m.spec.nodeName

		if !ok || m.synced[name] == want {
			continue
		}

		if c.id == k8s.APIServerConfigID && m.apiServerSettled != nil && !m.apiServerSettled() {
			continue
		}

		if err := m.replace(ctx, string(c.id), name, want); err != nil {
			return fmt.Errorf("mirror pod %s: %w", name, err)
		}

		m.synced[name] = want
	}

	return nil
}

func (m *mirrorPods) replace(ctx context.Context, component, name string, want staticPod) error {
	pods := m.client.CoreV1().Pods(metav1.NamespaceSystem)

	err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}

	sum := sha256.Sum256([]byte(want.image + "\x00" + want.version + "\x00" + want.files))
	hash := hex.EncodeToString(sum[:16])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"k8s-app": component, "tier": "control-plane"},
			Annotations: map[string]string{
				corev1.MirrorPodAnnotationKey:              hash,
				"kubernetes.io/config.hash":                hash,
				"kubernetes.io/config.source":              "file",
				constants.AnnotationStaticPodConfigVersion: want.version,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: m.node.Name, UID: m.node.UID, Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:          m.spec.nodeName,
			HostNetwork:       true,
			PriorityClassName: "system-cluster-critical",
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:        []corev1.Container{{Name: component, Image: want.image}},
		},
	}

	if want.files != "" {
		pod.Annotations[constants.AnnotationStaticPodConfigFileVersion] = want.files
	}

	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}

	created.Status = runningStatus(created, m.spec.ips[0].String(), metav1.Now())

	_, err = pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})

	return err
}
