package render

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/imageref"
)

// KubernetesVersion is the version component c of machine m renders at:
// the one a kubernetes-upgrade set for it in m's status, else the
// cluster's spec.kubernetesVersion.
func KubernetesVersion(cluster *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, c ichorv1alpha1.KubernetesComponent) string {
	if v := m.Status.Kubernetes.Version(c); v != "" {
		return v
	}
	return cluster.Spec.KubernetesVersion
}

// withKubernetesVersions moves the images of the components a
// kubernetes-upgrade set a version for to that version's tag, as
// talosctl upgrade-k8s patches them: each component's image, in the
// documents (or, before the v1.14 contract, the sections) the generator
// wrote for the machine's type.
func withKubernetesVersions(cfg config.Provider, contract *config.VersionContract, versions *ichorv1alpha1.KubernetesVersions) (config.Provider, error) {
	if versions == nil || *versions == (ichorv1alpha1.KubernetesVersions{}) {
		return cfg, nil
	}
	retag := func(image *string, version string) {
		if version != "" && *image != "" {
			*image = imageref.WithTag(*image, version)
		}
	}
	if multidoc(contract) {
		var err error
		for _, edit := range []func(config.Provider) (config.Provider, error){
			retagDocument(k8s.KubeletConfig, func(d *k8s.KubeletConfigV1Alpha1) { retag(&d.KubeletImage, versions.Kubelet) }),
			retagDocument(k8s.KubeAPIServerConfig, func(d *k8s.KubeAPIServerConfigV1Alpha1) { retag(&d.PodImage, versions.APIServer) }),
			retagDocument(k8s.KubeControllerManagerConfig, func(d *k8s.KubeControllerManagerConfigV1Alpha1) { retag(&d.PodImage, versions.ControllerManager) }),
			retagDocument(k8s.KubeSchedulerConfig, func(d *k8s.KubeSchedulerConfigV1Alpha1) { retag(&d.PodImage, versions.Scheduler) }),
			retagDocument(k8s.KubeProxyConfig, func(d *k8s.KubeProxyConfigV1Alpha1) { retag(&d.ProxyImage, versions.Proxy) }),
		} {
			if cfg, err = edit(cfg); err != nil {
				return nil, err
			}
		}
		return cfg, nil
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.MachineConfig == nil || c.MachineConfig.MachineKubelet == nil { //nolint:staticcheck // the v1.13 layout
			return fmt.Errorf("config has no machine.kubelet section")
		}
		retag(&c.MachineConfig.MachineKubelet.KubeletImage, versions.Kubelet) //nolint:staticcheck // the v1.13 layout
		if cl := c.ClusterConfig; cl != nil {
			if cl.APIServerConfig != nil { //nolint:staticcheck // the v1.13 layout
				retag(&cl.APIServerConfig.ContainerImage, versions.APIServer) //nolint:staticcheck // the v1.13 layout
			}
			if cl.ControllerManagerConfig != nil { //nolint:staticcheck // the v1.13 layout
				retag(&cl.ControllerManagerConfig.ContainerImage, versions.ControllerManager) //nolint:staticcheck // the v1.13 layout
			}
			if cl.SchedulerConfig != nil { //nolint:staticcheck // the v1.13 layout
				retag(&cl.SchedulerConfig.ContainerImage, versions.Scheduler) //nolint:staticcheck // the v1.13 layout
			}
			if cl.ProxyConfig != nil { //nolint:staticcheck // the v1.13 layout
				retag(&cl.ProxyConfig.ContainerImage, versions.Proxy) //nolint:staticcheck // the v1.13 layout
			}
		}
		return nil
	})
}

// retagDocument edits the document of type T when the config has one (a
// worker has no control-plane component's).
func retagDocument[T configconfig.Document](kind string, retag func(T)) func(config.Provider) (config.Provider, error) {
	return func(cfg config.Provider) (config.Provider, error) {
		for _, d := range cfg.Documents() {
			if _, ok := d.(T); ok {
				return editDocument(cfg, kind, nil, func(d T) error { retag(d); return nil })
			}
		}
		return cfg, nil
	}
}

// ComponentImage is the image cfg runs component c with, in either layout;
// "" when cfg runs no such component (a worker's control-plane components).
func ComponentImage(cfg configconfig.Config, c ichorv1alpha1.KubernetesComponent) string {
	switch c {
	case ichorv1alpha1.ComponentAPIServer:
		if x := cfg.K8sAPIServerConfig(); x != nil {
			return x.Image()
		}
	case ichorv1alpha1.ComponentControllerManager:
		if x := cfg.K8sControllerManagerConfig(); x != nil {
			return x.Image()
		}
	case ichorv1alpha1.ComponentScheduler:
		if x := cfg.K8sSchedulerConfig(); x != nil {
			return x.Image()
		}
	case ichorv1alpha1.ComponentProxy:
		if x := cfg.K8sProxyConfig(); x != nil {
			return x.Image()
		}
	case ichorv1alpha1.ComponentKubelet:
		if x := cfg.K8sKubeletConfig(); x != nil {
			return x.Image()
		}
	}
	return ""
}

// InstallerImage is the installer image cfg names, in either layout: its
// UnattendedInstallConfig's from the v1.14 contract on, machine.install's
// before; "" when it names none.
func InstallerImage(cfg configconfig.Config) string {
	if u := cfg.UnattendedInstallConfig(); u != nil && u.InstallerImage() != "" {
		return u.InstallerImage()
	}
	if m := cfg.Machine(); m != nil {
		return m.Install().Image()
	}
	return ""
}
