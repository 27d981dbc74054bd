package render

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// withServerTLSBootstrap sets the kubelet's serverTLSBootstrap, the switch
// the cluster's security.kubeletServingCertificates.enabled stands for: the
// kubelet then asks for its serving certificate with a CSR that Ichor's
// approver checks. Never the deprecated rotate-server-certificates flag. It
// lives in the KubeletConfig document's config from the v1.14 contract on,
// in machine.kubelet.extraConfig before.
func withServerTLSBootstrap(cfg config.Provider, contract *config.VersionContract) (config.Provider, error) {
	set := func(u *meta.Unstructured) {
		if u.Object == nil {
			u.Object = map[string]any{}
		}
		u.Object["serverTLSBootstrap"] = true
	}
	if multidoc(contract) {
		return editDocument(cfg, k8s.KubeletConfig, nil, func(k *k8s.KubeletConfigV1Alpha1) error {
			set(&k.KubeletConfig)
			return nil
		})
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.MachineConfig == nil {
			return fmt.Errorf("config has no machine section")
		}
		if c.MachineConfig.MachineKubelet == nil { //nolint:staticcheck // the v1.13 layout
			c.MachineConfig.MachineKubelet = &talosv1alpha1.KubeletConfig{} //nolint:staticcheck // the v1.13 layout
		}
		set(&c.MachineConfig.MachineKubelet.KubeletExtraConfig) //nolint:staticcheck // the v1.13 layout
		return nil
	})
}

// kubeletCAPath is the Kubernetes CA inside Talos's kube-apiserver, the file
// kube-controller-manager signs kubelet serving certificates with
// (--cluster-signing-cert-file), so one CA signs and verifies them.
const kubeletCAPath = "/system/secrets/kubernetes/kube-apiserver/ca.crt"

// verifiesKubelets is true when kube-apiserver is to verify kubelets: the
// option is on and every machine has had a CA-signed serving certificate
// (the KubeletServingVerified latch). Before that, verification would break
// logs and exec on nodes still serving self-signed certificates.
func verifiesKubelets(cluster *ichorv1alpha1.TalosCluster) bool {
	opt := cluster.Spec.Security.KubeletServingCertificates
	return opt.Enabled && opt.VerifyFromAPIServer &&
		apimeta.IsStatusConditionTrue(cluster.Status.Conditions, ichorv1alpha1.ClusterConditionKubeletServingVerified)
}

// withKubeletCertificateAuthority has kube-apiserver verify kubelets against
// the cluster CA: an extra argument of KubeAPIServerConfig, or of
// cluster.apiServer before the v1.14 contract.
func withKubeletCertificateAuthority(cfg config.Provider, contract *config.VersionContract) (config.Provider, error) {
	return withAPIServerArgs(cfg, contract, map[string]string{"kubelet-certificate-authority": kubeletCAPath})
}

// withAPIServerArgs sets kube-apiserver's extra arguments args in the
// contract's place for them.
func withAPIServerArgs(cfg config.Provider, contract *config.VersionContract, args map[string]string) (config.Provider, error) {
	set := func(a *meta.Args) {
		if *a == nil {
			*a = meta.Args{}
		}
		for k, v := range args {
			(*a)[k] = meta.NewArgValue(v, nil)
		}
	}
	if multidoc(contract) {
		return editDocument(cfg, k8s.KubeAPIServerConfig, nil, func(api *k8s.KubeAPIServerConfigV1Alpha1) error {
			set(&api.PodArgs)
			return nil
		})
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.ClusterConfig == nil {
			return fmt.Errorf("config has no cluster section")
		}
		if c.ClusterConfig.APIServerConfig == nil { //nolint:staticcheck // the v1.13 layout
			c.ClusterConfig.APIServerConfig = &talosv1alpha1.APIServerConfig{} //nolint:staticcheck // the v1.13 layout
		}
		set(&c.ClusterConfig.APIServerConfig.ExtraArgsConfig) //nolint:staticcheck // the v1.13 layout
		return nil
	})
}

// ClusterVersion is the Talos version the cluster runs: the one every
// machine reports (status.talosVersion, which a talos-upgrade moves), or
// spec.talosVersion before the machines report one. The version contract
// stays spec.talosVersion's: configs keep the form the cluster was created
// with, as Talos recommends across upgrades.
func ClusterVersion(c *ichorv1alpha1.TalosCluster) string {
	if c.Status.TalosVersion != "" {
		return c.Status.TalosVersion
	}
	return c.Spec.TalosVersion
}

// baseConfig generates the machine's config from the cluster and machine
// inputs alone, with machinery's generator, before any TalosConfigPatch.
func baseConfig(in Input) (config.Provider, *config.VersionContract, error) {
	cluster, m := in.Cluster, in.Machine
	spec := cluster.Spec

	contract, err := checkVersions(spec.TalosVersion, spec.KubernetesVersion)
	if err != nil {
		return nil, nil, err
	}
	if err := checkEndpoint(spec.ControlPlane.Endpoint); err != nil {
		return nil, nil, &InputError{Field: "TalosCluster.spec.controlPlane.endpoint", Err: err}
	}
	disk := InstallDisk(m)
	if disk == "" {
		return nil, nil, &InputError{Field: "TalosMachine.spec.install.disk",
			Err: errors.New("no install disk: the node reported none Ichor would pick (USB disks are not); set one")}
	}

	opts := []generate.Option{
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(in.Secrets),
		generate.WithInstallDisk(disk),
	}
	installer, err := InstallerFor(cluster, m, in.ImageFactory, in.InstallImage)
	if err != nil {
		return nil, nil, err
	}
	if installer.Image != "" {
		opts = append(opts, generate.WithInstallImage(installer.Image))
	}
	if spec.Network.DNSDomain != "" {
		opts = append(opts, generate.WithDNSDomain(spec.Network.DNSDomain))
	}
	var noCNI bool
	switch spec.Network.CNI.Name {
	case "", ichorv1alpha1.CNIFlannel:
		// Talos's default.
	case ichorv1alpha1.CNICilium, ichorv1alpha1.CNINone:
		// Talos installs no CNI; Cilium is installed by Ichor with the cluster's values.
		noCNI = true
	default:
		return nil, nil, &InputError{Field: "TalosCluster.spec.network.cni.name",
			Err: fmt.Errorf("unknown CNI %q (want flannel, cilium or none)", spec.Network.CNI.Name)}
	}

	gen, err := generate.NewInput(cluster.Name, spec.ControlPlane.Endpoint,
		strings.TrimPrefix(spec.KubernetesVersion, "v"), opts...)
	if err != nil {
		return nil, nil, &InputError{Field: "TalosCluster.spec", Err: fmt.Errorf("generator input: %w", err)}
	}
	if len(spec.Network.PodCIDRs) > 0 {
		gen.PodNet = append([]string(nil), spec.Network.PodCIDRs...)
	}
	if len(spec.Network.ServiceCIDRs) > 0 {
		gen.ServiceNet = append([]string(nil), spec.Network.ServiceCIDRs...)
	}

	machineType := machine.TypeWorker
	if MachineRole(m) == ichorv1alpha1.MachineRoleControlPlane {
		machineType = machine.TypeControlPlane
	}
	cfg, err := gen.Config(machineType)
	if err != nil {
		return nil, nil, &InputError{Field: "TalosCluster.spec", Err: fmt.Errorf("generate %s config: %w", machineType, err)}
	}

	if noCNI {
		if cfg, err = withoutCNI(cfg, contract); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.spec.network.cni.name", Err: err}
		}
	}
	if cfg, err = withKubernetesVersions(cfg, contract, m.Status.Kubernetes); err != nil {
		return nil, nil, &InputError{Field: "TalosMachine.status.kubernetes", Err: err}
	}
	if len(in.TalosAcceptedCAs) > 0 || len(in.KubernetesAcceptedCAs) > 0 {
		if cfg, err = withAcceptedCAs(cfg, contract, in.TalosAcceptedCAs, in.KubernetesAcceptedCAs); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.status.caRotation", Err: err}
		}
	}
	if machineType == machine.TypeControlPlane {
		if cfg, err = withKubernetesKeys(cfg, contract, in.ServiceAccountAcceptedKeys, in.EncryptionKeys); err != nil {
			return nil, nil, &InputError{Field: "the key rotation's keys", Err: err}
		}
	}
	if m.Spec.Hostname != "" {
		if cfg, err = withHostname(cfg, m.Spec.Hostname); err != nil {
			return nil, nil, &InputError{Field: "TalosMachine.spec.hostname", Err: err}
		}
	}
	if spec.Security.KubeletServingCertificates.Enabled {
		if cfg, err = withServerTLSBootstrap(cfg, contract); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.spec.security.kubeletServingCertificates", Err: err}
		}
	}
	if e := spec.Security.DiskEncryption; e != nil {
		if cfg, err = withDiskEncryption(cfg, contract, e, DiskKeySlots(cluster)); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.spec.security.diskEncryption", Err: err}
		}
	}
	if a := spec.Authentication; a != nil && machineType == machine.TypeControlPlane {
		if cfg, err = withOIDCTrust(cfg, contract, a); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.spec.authentication", Err: err}
		}
	}
	if verifiesKubelets(cluster) && machineType == machine.TypeControlPlane {
		if cfg, err = withKubeletCertificateAuthority(cfg, contract); err != nil {
			return nil, nil, &InputError{Field: "TalosCluster.spec.security.kubeletServingCertificates.verifyFromAPIServer", Err: err}
		}
	}
	return cfg, contract, nil
}

// checkVersions parses the Talos version into machinery's version contract and
// refuses a Kubernetes version that Talos release does not support, using
// machinery's compatibility table. Machinery's own validation only checks
// this on a running node, so without it a too-new Kubernetes would render
// fine and fail on the node.
func checkVersions(talosVersion, kubernetesVersion string) (*config.VersionContract, error) {
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, &InputError{Field: "TalosCluster.spec.talosVersion", Err: err}
	}
	talos, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: talosVersion})
	if err != nil {
		return nil, &InputError{Field: "TalosCluster.spec.talosVersion", Err: err}
	}
	kube, err := compatibility.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return nil, &InputError{Field: "TalosCluster.spec.kubernetesVersion", Err: err}
	}
	if err := kube.SupportedWith(talos); err != nil {
		return nil, &InputError{Field: "TalosCluster.spec.kubernetesVersion",
			Err: fmt.Errorf("Kubernetes %s cannot run on Talos %s: %w", kubernetesVersion, talosVersion, err)}
	}
	return contract, nil
}

// SupportsKubernetes refuses a Kubernetes version that Talos version does
// not run, by the table checkVersions uses.
func SupportsKubernetes(talosVersion, kubernetesVersion string) error {
	_, err := checkVersions(talosVersion, kubernetesVersion)
	var in *InputError
	if errors.As(err, &in) {
		return in.Err
	}
	return err
}

// checkEndpoint requires an https URL with a host, the form Talos expects for
// cluster.controlPlane.endpoint.
func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an https URL with a host", endpoint)
	}
	return nil
}

// withHostname sets a fixed hostname. Talos 1.12 and later keep the hostname
// in a HostnameConfig document, which the generator fills with auto: stable;
// older contracts keep it in machine.network.hostname.
func withHostname(cfg config.Provider, hostname string) (config.Provider, error) {
	for _, doc := range cfg.Documents() {
		if hc, ok := doc.(*network.HostnameConfigV1Alpha1); ok {
			hc.ConfigAuto = nil
			hc.ConfigHostname = hostname
			return cfg, nil
		}
	}
	patch := fmt.Sprintf("machine:\n  network:\n    hostname: %q\n", hostname)
	return applyText(cfg, patch)
}

// withoutCNI has Talos install no CNI: the KubeFlannelCNIConfig document
// dropped, or cluster.network.cni named none before the v1.14 contract.
func withoutCNI(cfg config.Provider, contract *config.VersionContract) (config.Provider, error) {
	if multidoc(contract) {
		return withoutDocuments[*k8s.KubeFlannelCNIConfigV1Alpha1](cfg)
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.ClusterConfig == nil {
			return fmt.Errorf("config has no cluster section")
		}
		if c.ClusterConfig.ClusterNetwork == nil { //nolint:staticcheck // the v1.13 layout
			c.ClusterConfig.ClusterNetwork = &talosv1alpha1.ClusterNetworkConfig{} //nolint:staticcheck // the v1.13 layout
		}
		c.ClusterConfig.ClusterNetwork.CNI = &talosv1alpha1.CNIConfig{CNIName: constants.NoneCNI} //nolint:staticcheck // the v1.13 layout
		return nil
	})
}

// applyText applies a strategic-merge patch written by this package.
func applyText(cfg config.Provider, text string) (config.Provider, error) {
	p, err := configpatcher.LoadPatch([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("load internal patch: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
	if err != nil {
		return nil, fmt.Errorf("apply internal patch: %w", err)
	}
	return out.Config()
}
