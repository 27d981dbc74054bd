package render

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
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
// sections the generator wrote for the machine's type.
func withKubernetesVersions(cfg config.Provider, versions *ichorv1alpha1.KubernetesVersions) (config.Provider, error) {
	if versions == nil || *versions == (ichorv1alpha1.KubernetesVersions{}) {
		return cfg, nil
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		retag := func(image *string, version string) {
			if version != "" && *image != "" {
				*image = imageref.WithTag(*image, version)
			}
		}
		if c.MachineConfig == nil || c.MachineConfig.MachineKubelet == nil {
			return fmt.Errorf("config has no machine.kubelet section")
		}
		retag(&c.MachineConfig.MachineKubelet.KubeletImage, versions.Kubelet)
		if cl := c.ClusterConfig; cl != nil {
			if cl.APIServerConfig != nil {
				retag(&cl.APIServerConfig.ContainerImage, versions.APIServer)
			}
			if cl.ControllerManagerConfig != nil {
				retag(&cl.ControllerManagerConfig.ContainerImage, versions.ControllerManager)
			}
			if cl.SchedulerConfig != nil {
				retag(&cl.SchedulerConfig.ContainerImage, versions.Scheduler)
			}
			if cl.ProxyConfig != nil {
				retag(&cl.ProxyConfig.ContainerImage, versions.Proxy)
			}
		}
		return nil
	})
}
