package render

import (
	"slices"
	"strings"

	"github.com/blang/semver/v4"

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

// ApplyModel is how the node that takes a config applies a change.
type ApplyModel int

const (
	// ApplyWithReboot is Talos up to v1.13: ApplyConfiguration applies live
	// only what machined's immediate-apply rule lists and needs a reboot for
	// the rest. The tables above are written for it. It is the model of a
	// node whose version is not known.
	ApplyWithReboot ApplyModel = iota
	// ApplyLive is Talos from v1.14 on: ApplyConfiguration has no reboot
	// mode and every change is applied live, each controller converging to
	// it; what only the boot sequence reads (liveBootTime) still waits for a
	// reboot, and what only the installer reads for the next install or
	// upgrade takes effect there, a reboot or not.
	ApplyLive
)

// liveFrom is the first Talos version that applies every change live.
var liveFrom = semver.MustParse("1.14.0-alpha.0")

// ApplyModelOf is the apply model of a node running Talos version (v1.14.1);
// ApplyWithReboot when the version is empty or does not parse.
func ApplyModelOf(version string) ApplyModel {
	v, err := semver.ParseTolerant(version)
	if err != nil || v.LT(liveFrom) {
		return ApplyWithReboot
	}
	return ApplyLive
}

// liveBootTime are the v1alpha1 fields and document kinds a node applying
// live still takes only at a boot: read by its boot sequence (user files and
// environment in the userSetup and env phases; the sandbox that workload
// isolation runs CRI in, started with the services; the system volumes,
// their mount options and encryption, prepared before them) or by the
// filesystem's mount (disk quotas).
var liveBootTime = []string{
	"machine.files",
	"machine.env",
	"machine.systemDiskEncryption",
	"machine.features.diskQuotaSupport",
	"EnvironmentConfig",
	"SecurityProfileConfig",
	"VolumeConfig",
}

// liveNoReboot are the v1alpha1 sections and document kinds a node applying
// live takes without one, where the tables above say Reboot: what only the
// installer reads (the next install or upgrade applies it, a reboot would
// not), and what a v1.14 controller converges to: user disks and volumes,
// swap, udev rules.
var liveNoReboot = []string{
	"machine.install",
	"machine.disks",
	"machine.udev",
	"UnattendedInstallConfig",
	"UserVolumeConfig",
	"RawVolumeConfig",
	"ExistingVolumeConfig",
	"SwapVolumeConfig",
	"ZswapConfig",
	"UdevRulesConfig",
}

// liveEffect is the effect on a node applying live of a change that the
// tables above give effect: a boot-time field keeps Reboot; under cluster.
// (the control plane's components, etcd, the cluster's secrets) a Reboot
// becomes a restart of what reads it, kube-apiserver and etcd on a control
// plane, one at a time; the fields and kinds of liveNoReboot need none.
// Whatever Ichor has not studied keeps Reboot.
func liveEffect(path []string, kind string, effect ichorv1alpha1.ConfigEffect) ichorv1alpha1.ConfigEffect {
	if effect != ichorv1alpha1.ConfigEffectReboot {
		return effect
	}
	matches := func(list []string) bool {
		return slices.ContainsFunc(list, func(p string) bool {
			return kind != "" && p == kind || kind == "" && hasPrefix(path, strings.Split(p, "."))
		})
	}
	switch {
	case matches(liveBootTime):
		return ichorv1alpha1.ConfigEffectReboot
	case matches(liveNoReboot):
		return ichorv1alpha1.ConfigEffectNoReboot
	case kind == "" && len(path) > 0 && path[0] == "cluster":
		return ichorv1alpha1.ConfigEffectAPIServerRestart
	}
	return effect
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
