package render

import (
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// effectRank orders effects by how disruptive a rollout must be. A reboot
// restarts kube-apiserver on a control plane too, so Reboot covers
// APIServerRestart and ranks above it.
var effectRank = map[ichorv1alpha1.ConfigEffect]int{
	ichorv1alpha1.ConfigEffectNone:             0,
	ichorv1alpha1.ConfigEffectNoReboot:         1,
	ichorv1alpha1.ConfigEffectAPIServerRestart: 2,
	ichorv1alpha1.ConfigEffectReboot:           3,
}

// Strongest returns the most disruptive of the effects, None when there are none.
// The controller uses it to combine the effects of several changes or patches.
func Strongest(effects ...ichorv1alpha1.ConfigEffect) ichorv1alpha1.ConfigEffect {
	out := ichorv1alpha1.ConfigEffectNone
	for _, e := range effects {
		if effectRank[e] > effectRank[out] {
			out = e
		}
	}
	return out
}

// effectRule gives the effect of a change at or below a v1alpha1 field path.
type effectRule struct {
	path   string
	effect ichorv1alpha1.ConfigEffect
}

// v1alpha1Effects is the effect of changing each v1alpha1 field; the longest
// matching path wins, and a field in none of them needs a reboot.
//
// It never claims less than Talos: a field Talos cannot apply without a reboot
// (every field its immediate-apply rule does not list; see canApplyImmediate
// in test/talossim/apply.go, which mirrors machined) is Reboot here. Where
// Talos accepts a change live but the change only acts at the next boot or
// install, the table says Reboot as well: machine.install.* (install disk,
// image, kernel arguments) and cluster.etcd.*, and the cluster's secrets from
// the bundle (cluster.ca, tokens, keys), which are rotated by their own
// operations. machine.ca and machine.acceptedCAs stay NoReboot: Talos CA
// rotation swaps them live.
var v1alpha1Effects = []effectRule{
	{"debug", ichorv1alpha1.ConfigEffectNoReboot},

	{"machine.ca", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.acceptedCAs", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.certSANs", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.install", ichorv1alpha1.ConfigEffectReboot},
	// The installer image is read only by the next upgrade or install: Talos
	// takes it live, and a reboot does nothing with it. After an upgrade the
	// rendered image follows the new version on every machine without one.
	{"machine.install.image", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.kernel", ichorv1alpha1.ConfigEffectNoReboot},
	// Talos restarts the kubelet service for a new kubelet config, image
	// included (talosctl upgrade-k8s moves kubelets so); pods keep running.
	{"machine.kubelet", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.network", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.sysctls", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.sysfs", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.time", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.registries", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.logging", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.controlPlane", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.pods", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.seccompProfiles", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.nodeLabels", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.nodeAnnotations", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.nodeTaints", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.features.kubernetesTalosAPIAccess", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.features.kubePrism", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.features.hostDNS", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.features.imageCache", ichorv1alpha1.ConfigEffectNoReboot},
	{"machine.features.nodeAddressSortAlgorithm", ichorv1alpha1.ConfigEffectNoReboot},
	// Written or read only at boot: files, env, disks, udev, encryption, other features.
	{"machine.files", ichorv1alpha1.ConfigEffectReboot},
	{"machine.env", ichorv1alpha1.ConfigEffectReboot},
	{"machine.disks", ichorv1alpha1.ConfigEffectReboot},
	{"machine.udev", ichorv1alpha1.ConfigEffectReboot},
	{"machine.systemDiskEncryption", ichorv1alpha1.ConfigEffectReboot},
	{"machine.features", ichorv1alpha1.ConfigEffectReboot},

	{"cluster.apiServer", ichorv1alpha1.ConfigEffectAPIServerRestart},
	// The Kubernetes CAs (a CA rotation): Talos applies them live, restarting
	// kube-apiserver and the controller manager with certificates of the
	// issuing CA on a control plane, and the kubelet on every node.
	{"cluster.ca", ichorv1alpha1.ConfigEffectAPIServerRestart},
	{"cluster.acceptedCAs", ichorv1alpha1.ConfigEffectAPIServerRestart},
	// The endpoint and the service network are kube-apiserver certificate SANs and flags.
	{"cluster.controlPlane", ichorv1alpha1.ConfigEffectAPIServerRestart},
	{"cluster.network", ichorv1alpha1.ConfigEffectAPIServerRestart},
	{"cluster.controllerManager", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.scheduler", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.proxy", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.coreDNS", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.discovery", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.externalCloudProvider", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.extraManifests", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.extraManifestHeaders", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.inlineManifests", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.adminKubeconfig", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.allowSchedulingOnControlPlanes", ichorv1alpha1.ConfigEffectNoReboot},
	{"cluster.etcd", ichorv1alpha1.ConfigEffectReboot},
}

// controlPlaneOnly are sections only control planes run. On a worker their
// change restarts nothing, so it is NoReboot whatever the table says.
var controlPlaneOnly = []string{
	"cluster.apiServer",
	"cluster.controllerManager",
	"cluster.scheduler",
	"cluster.etcd",
}

// documentEffects is the effect of changing a whole multi-document config
// document, by kind. Talos applies every such document live; the kinds whose
// effect is only felt at boot, or that Ichor has not studied, need a reboot.
var documentEffects = map[string]ichorv1alpha1.ConfigEffect{
	"HostnameConfig":             ichorv1alpha1.ConfigEffectNoReboot,
	"ResolverConfig":             ichorv1alpha1.ConfigEffectNoReboot,
	"TimeSyncConfig":             ichorv1alpha1.ConfigEffectNoReboot,
	"StaticHostConfig":           ichorv1alpha1.ConfigEffectNoReboot,
	"LinkConfig":                 ichorv1alpha1.ConfigEffectNoReboot,
	"LinkAliasConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"BondConfig":                 ichorv1alpha1.ConfigEffectNoReboot,
	"BridgeConfig":               ichorv1alpha1.ConfigEffectNoReboot,
	"VLANConfig":                 ichorv1alpha1.ConfigEffectNoReboot,
	"VRFConfig":                  ichorv1alpha1.ConfigEffectNoReboot,
	"DummyLinkConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"WireguardConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"DHCPv4Config":               ichorv1alpha1.ConfigEffectNoReboot,
	"DHCPv6Config":               ichorv1alpha1.ConfigEffectNoReboot,
	"Layer2VIPConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"HCloudVIPConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"RoutingRuleConfig":          ichorv1alpha1.ConfigEffectNoReboot,
	"BlackholeRouteConfig":       ichorv1alpha1.ConfigEffectNoReboot,
	"NetworkRuleConfig":          ichorv1alpha1.ConfigEffectNoReboot,
	"NetworkDefaultActionConfig": ichorv1alpha1.ConfigEffectNoReboot,
	"KubeSpanConfig":             ichorv1alpha1.ConfigEffectNoReboot,
	"KubeSpanEndpointsConfig":    ichorv1alpha1.ConfigEffectNoReboot,
	"RegistryMirrorConfig":       ichorv1alpha1.ConfigEffectNoReboot,
	"RegistryAuthConfig":         ichorv1alpha1.ConfigEffectNoReboot,
	"RegistryTLSConfig":          ichorv1alpha1.ConfigEffectNoReboot,
	"TrustedRootsConfig":         ichorv1alpha1.ConfigEffectNoReboot,
	"KmsgLogConfig":              ichorv1alpha1.ConfigEffectNoReboot,
	"EventSinkConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"WatchdogTimerConfig":        ichorv1alpha1.ConfigEffectNoReboot,
	// Talos v1.14's documents take the effect of the v1alpha1 section they
	// replace: kube-apiserver's settings and the CAs it serves with restart
	// it; the kubelet, other components, manifests and kernel settings apply
	// live; files, udev rules and the install only take effect at a boot.
	k8s.KubeletConfig:              ichorv1alpha1.ConfigEffectNoReboot,
	"KubeNodeConfig":               ichorv1alpha1.ConfigEffectNoReboot,
	"KubeCredentialProviderConfig": ichorv1alpha1.ConfigEffectNoReboot,
	"KubeStaticPodConfig":          ichorv1alpha1.ConfigEffectNoReboot,
	"KubeTalosAPIAccessConfig":     ichorv1alpha1.ConfigEffectNoReboot,
	"KubePrismConfig":              ichorv1alpha1.ConfigEffectNoReboot,
	"KubeControllerManagerConfig":  ichorv1alpha1.ConfigEffectNoReboot,
	"KubeSchedulerConfig":          ichorv1alpha1.ConfigEffectNoReboot,
	"KubeProxyConfig":              ichorv1alpha1.ConfigEffectNoReboot,
	"KubeCoreDNSConfig":            ichorv1alpha1.ConfigEffectNoReboot,
	"KubeFlannelCNIConfig":         ichorv1alpha1.ConfigEffectNoReboot,
	"KubeExternalManifestConfig":   ichorv1alpha1.ConfigEffectNoReboot,
	"KubeInlineManifestConfig":     ichorv1alpha1.ConfigEffectNoReboot,
	"KubeAPIServerConfig":          ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAPIServerCAConfig":        ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAggregatorCAConfig":       ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeServiceAccountConfig":     ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeEtcdEncryptionConfig":     ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAuthenticationConfig":     ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAuthorizerConfig":         ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAdmissionControlConfig":   ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeAuditPolicyConfig":        ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeClusterConfig":            ichorv1alpha1.ConfigEffectAPIServerRestart,
	"KubeNetworkConfig":            ichorv1alpha1.ConfigEffectAPIServerRestart,
	"DiscoveryServiceConfig":       ichorv1alpha1.ConfigEffectNoReboot,
	"DiscoveryIdentityConfig":      ichorv1alpha1.ConfigEffectNoReboot,
	"CRICustomizationConfig":       ichorv1alpha1.ConfigEffectNoReboot,
	"CRIBaseRuntimeSpecConfig":     ichorv1alpha1.ConfigEffectNoReboot,
	"ImageCacheConfig":             ichorv1alpha1.ConfigEffectNoReboot,
	"SysctlConfig":                 ichorv1alpha1.ConfigEffectNoReboot,
	"SysfsConfig":                  ichorv1alpha1.ConfigEffectNoReboot,
	"KernelModuleConfig":           ichorv1alpha1.ConfigEffectNoReboot,
	"HTTPProbeConfig":              ichorv1alpha1.ConfigEffectNoReboot,
	"VethConfig":                   ichorv1alpha1.ConfigEffectNoReboot,
	"FilesystemTrimConfig":         ichorv1alpha1.ConfigEffectNoReboot,
	"FilesystemScrubConfig":        ichorv1alpha1.ConfigEffectNoReboot,
}

// v1alpha1Effect is the effect of a change at path in the v1alpha1 document.
func v1alpha1Effect(path []string, worker bool) ichorv1alpha1.ConfigEffect {
	if worker {
		for _, p := range controlPlaneOnly {
			if hasPrefix(path, strings.Split(p, ".")) {
				return ichorv1alpha1.ConfigEffectNoReboot
			}
		}
	}
	best, bestLen := ichorv1alpha1.ConfigEffectReboot, 0
	for _, rule := range v1alpha1Effects {
		rulePath := strings.Split(rule.path, ".")
		if len(rulePath) > bestLen && hasPrefix(path, rulePath) {
			best, bestLen = rule.effect, len(rulePath)
		}
	}
	return best
}

// documentEffect is the effect of a change to a document of the given kind.
func documentEffect(kind string) ichorv1alpha1.ConfigEffect {
	if e, ok := documentEffects[kind]; ok {
		return e
	}
	return ichorv1alpha1.ConfigEffectReboot
}

// hasPrefix reports whether path is prefix or lies below it.
func hasPrefix(path, prefix []string) bool {
	if len(path) < len(prefix) {
		return false
	}
	for i := range prefix {
		if path[i] != prefix[i] {
			return false
		}
	}
	return true
}
